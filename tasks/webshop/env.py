"""WebShop in text mode (shipped to the agent as $DATA_PATH/env.py; the grader plays the held-out goals with it).

    import sys; sys.path.insert(0, DATA_PATH)
    import env
    shop, goals = env.load_catalogue(), env.load_goals()       # the 1,000 products and the training goals
    e = env.WebShopEnv(shop, goals[0])
    obs = e.reset()                                              # the search page, with the instruction
    obs, reward, done, info = e.step("search[3 ounce bright citrus deodorant]")
    # ... click[b078gwrc1j] (a product), click[bright citrus] (an option), click[buy now]
    # buying ends the episode: reward is WebShop's score in [0, 1]; info["won"] is reward == 1
    episode = env.rollout(policy_fn, shop, goals[0])           # policy_fn(prompt) -> completion, as graded

A standard-library port of princeton-nlp/WebShop: the pages and transitions of its text environment
(web_agent_site/envs/web_agent_text_env.py, observation_mode="text"), its reward (web_agent_site/engine/goal.py,
with thefuzz's token_set_ratio ported exactly) and its search engine's inputs (search_engine/
convert_product_file_format.py). Pages follow the released templates ("Instruction:", "Back to Search",
"< Prev", "Page 1 (Total results: 50)", ...), joined by " [SEP] " as the text mode's BeautifulSoup pass joins
them. Deviations: search ranks with BM25 in Python over a light analyzer, not Pyserini's Lucene index (same
documents, k1/b and top 50: close rankings, not identical ones); the type reward's title overlap counts content
words where upstream counts spaCy nouns; the done page shows only the score; and every observation ends with
the page's available actions (upstream's get_available_actions), which the reference's prompt listed too.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Callable

try:  # the grader, or an agent environment with a2rl installed
    from a2rl.tasklib.envs import Episode, Fits, ReactTranscript, Render, Transcript
    from a2rl.tasklib.envs import rollout as _rollout
except ImportError:  # the agent's workspace: prepare ships a2rl/tasklib/envs.py next to this file as react.py
    from react import Episode, Fits, ReactTranscript, Render, Transcript  # type: ignore[no-redef]
    from react import rollout as _rollout

HEADER = (
    "You are shopping on WebShop, a simulated online store, for the product an instruction describes. "
    "Each observation is the current web page (its texts separated by [SEP]) followed by the actions it "
    'allows. Write one action after "Action:": search[keywords] on the search page, or click[x] where x is '
    "a button, a product ID or an option value on the page, e.g. click[b078gwrc1j], click[large], "
    "click[< prev], click[buy now]. Open a matching product, click every option the instruction asks for, "
    "then click[buy now]: buying ends the episode and scores the product's type, attributes, options and "
    'price against the instruction. Write "think: ..." to reason.'
)


def prompt_header(data_dir: str | Path, episode: str) -> str:
    """The common protocol (a2rl/tasklib/envs.py): one header for every goal."""
    return HEADER


# Protocol `paper`: the reference's prompt (autorl_bench webshop/eval.py), sent with the model's chat template.
PAPER_SYSTEM = (
    "You are a helpful shopping assistant browsing an e-commerce website. Given a user instruction, current "
    "observation, and available actions, pick the best action to find and purchase a matching product. "
    "Output ONLY one action (e.g., 'search[red shoes]', 'click[buy now]') with NO extra text, NO "
    "explanation."
)
PAPER_RULES = """Rules:
- Output ONLY one action from the available actions list above.
- For search, use: search[your query]
- For clicking, use: click[exact text from the list]
- Do NOT output anything other than the action.

Now it's your turn:
"""

MAX_NEW_TOKENS = {"paper": 100, "a2rl": 64}  # per action: task.yaml's eval.<protocol>.max_new_tokens (a test checks)
HISTORY_WINDOW = 5  # paper: the steps its prompt shows (task.yaml's eval.paper.history_window)

SEARCH_RETURN_N = 50  # engine.py: results per search
PRODUCT_WINDOW = 10  # engine.py: results per page
BM25_K1, BM25_B = 0.9, 0.4  # Pyserini's LuceneSearcher defaults, which WebShop's engine keeps
SUB_PAGES = ("description", "features", "reviews")  # the item page's buttons, lowercased as upstream's clickables


# ---- thefuzz.fuzz.token_set_ratio (thefuzz 0.22 over rapidfuzz), as goal.py scores attributes and options


def _full_process(s: str) -> str:
    """thefuzz.utils.full_process(force_ascii=True): drop chars 128-255, non-alphanumerics to spaces, lower."""
    s = s.translate({i: None for i in range(128, 256)})
    return re.sub(r"[\W_]", " ", s).strip().lower()


def _indel_distance(a: str, b: str) -> int:
    """Insertions + deletions turning a into b: len(a) + len(b) - 2 * LCS."""
    row = [0] * (len(b) + 1)
    for ca in a:
        prev = 0  # LCS of the previous prefix of a with b[:j-1]
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], prev + 1 if ca == cb else max(row[j], row[j - 1])
    return len(a) + len(b) - 2 * row[-1]


def _norm(dist: int, lensum: int) -> float:
    return 100.0 - 100.0 * dist / lensum if lensum else 100.0


def token_set_ratio(s1: str, s2: str) -> int:
    s1, s2 = _full_process(s1), _full_process(s2)
    a, b = set(s1.split()), set(s2.split())
    if not a or not b:
        return 0
    sect, ab, ba = a & b, a - b, b - a
    if sect and (not ab or not ba):  # one token set contains the other
        return 100
    ab_joined, ba_joined = " ".join(sorted(ab)), " ".join(sorted(ba))
    sect_len = len(" ".join(sect))
    sect_ab_len = sect_len + (sect_len != 0) + len(ab_joined)
    sect_ba_len = sect_len + (sect_len != 0) + len(ba_joined)
    result = _norm(_indel_distance(ab_joined, ba_joined), sect_ab_len + sect_ba_len)
    if sect_len:
        result = max(
            result,
            _norm((sect_len != 0) + len(ab_joined), sect_len + sect_ab_len),
            _norm((sect_len != 0) + len(ba_joined), sect_len + sect_ba_len),
        )
    return int(round(result))


# ---- web_agent_site/engine/normalize.py and goal.py

COLOR_SET = [
    "alabaster",
    "apricot",
    "aqua",
    "ash",
    "asphalt",
    "azure",
    "banana",
    "beige",
    "black",
    "blue",
    "blush",
    "bordeaux",
    "bronze",
    "brown",
    "burgundy",
    "camel",
    "camo",
    "caramel",
    "champagne",
    "charcoal",
    "cheetah",
    "chestnut",
    "chocolate",
    "christmas",
    "coffee",
    "cognac",
    "copper",
    "coral",
    "cranberry",
    "cream",
    "crystal",
    "dark",
    "denim",
    "eggplant",
    "elephant",
    "espresso",
    "fuchsia",
    "gold",
    "granite",
    "grape",
    "graphite",
    "grass",
    "gray",
    "green",
    "grey",
    "heather",
    "indigo",
    "ivory",
    "ivy",
    "khaki",
    "lavender",
    "lemon",
    "leopard",
    "light",
    "lilac",
    "lime",
    "magenta",
    "maroon",
    "mauve",
    "merlot",
    "midnight",
    "mint",
    "mocha",
    "multicolor",
    "mushroom",
    "mustard",
    "natural",
    "navy",
    "nude",
    "olive",
    "orange",
    "peach",
    "pewter",
    "pink",
    "plum",
    "purple",
    "rainbow",
    "red",
    "rose",
    "royal",
    "rust",
    "sand",
    "sapphire",
    "seashell",
    "silver",
    "skull",
    "slate",
    "steel",
    "stone",
    "stonewash",
    "sunflower",
    "tan",
    "taupe",
    "teal",
    "tiger",
    "turquoise",
    "violet",
    "walnut",
    "wheat",
    "white",
    "wine",
    "yellow",
]


def normalize_color(color_string: str) -> str:
    """The first COLOR_SET entry inside the string, else the string."""
    return next((c for c in COLOR_SET if c in color_string), color_string)


# Function words of product names: spaCy (which upstream uses to keep only nouns) tags them otherwise.
_FUNCTION_WORDS = frozenset(
    "a an and are as at be but by for from has have in into is it its of on or per s such that the their this "
    "to up was will with without you your".split()
)


def title_words(name: str) -> list[str]:
    """Stand-in for goal.py's spaCy NOUN/PROPN tokens of a product name: its words bar numbers and function words
    (a list: repeated words count, as upstream's list of tokens does)."""
    words = re.findall(r"[a-z0-9]+(?:\.[a-z0-9]+)*", name.lower())
    return [w for w in words if re.search(r"[a-z]", w) and w not in _FUNCTION_WORDS]


def type_reward(product: dict, goal: dict) -> dict[str, Any]:
    query_match = product["query"] == goal["query"]
    categories = [{c.strip() for c in x["product_category"].split("›")} for x in (product, goal)]
    category_match = len(categories[0] & categories[1]) >= 2
    bought, wanted = title_words(product["name"]), title_words(goal["name"])
    title_score = len(set(bought) & set(wanted)) / len(wanted) if wanted else 0.2
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return {"r_type": r_type, "query_match": query_match, "category_match": category_match, "title_score": title_score}


def attribute_matches(product: dict, goal_attrs: list[str]) -> int:
    """Goal attributes fuzzily among the product's attributes, or literally in its title, features or description."""
    text = [product["Title"].lower(), " ".join(product["BulletPoints"]).lower(), product["Description"].lower()]
    return sum(
        any(token_set_ratio(p, g) > 85 for p in product["Attributes"]) or any(g in t for t in text) for g in goal_attrs
    )


def goal_option_texts(goal_options: list[str] | dict[str, str]) -> list[str]:
    """What goal.get_option_reward compares, after normalize_color. Human goals list option values. Synthetic goals
    hold a dict, of which upstream passes the (name, value) pairs: normalize_color on a pair only matches a color
    equal to the name or the value, and thefuzz scores any other pair as the text "('name', 'value')", so a
    synthetic goal's option matches on its name too and a multi-word color is never normalized (kept: protocol
    `paper` grades synthetic goals and must score as upstream does)."""
    if isinstance(goal_options, dict):
        return [next((c for c in COLOR_SET if c in pair), str(pair)) for pair in goal_options.items()]
    return [normalize_color(g) for g in goal_options]


def option_matches(purchased: list[str], goal_options: list[str] | dict[str, str]) -> int:
    """Goal options fuzzily among the purchased ones, colors normalized first."""
    purchased = [normalize_color(o) for o in purchased]
    return sum(any(token_set_ratio(p, g) > 85 for p in purchased) for g in goal_option_texts(goal_options))


def get_reward(product: dict, goal: dict, price: float, options: dict[str, str]) -> tuple[float, dict[str, Any]]:
    """goal.get_reward(verbose=True): (type × share of attributes, options and price matched, details)."""
    goal_options = goal["goal_options"]  # a list for human goals, a dict for synthetic ones
    n_attr, n_opt = len(goal["attributes"]), len(goal_options)
    r_type = type_reward(product, goal)
    r_price = price <= goal["price_upper"]
    attrs, opts = attribute_matches(product, goal["attributes"]), option_matches(list(options.values()), goal_options)
    total = (attrs + opts + r_price) / (n_attr + n_opt + 1) * r_type["r_type"]
    info = {**r_type, "r_att": attrs / n_attr, "r_price": r_price}
    if n_opt:
        info["r_option"] = opts / n_opt
    return total, info


# ---- search: search_engine/convert_product_file_format.py's documents, ranked with BM25

_LUCENE_STOPWORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there these "
    "they this to was will with".split()
)


def _stem(word: str) -> str:
    """Harman's S-stemmer (plural to singular), a light stand-in for Lucene's Porter stemmer."""
    if len(word) > 3 and word.endswith("ies") and not word.endswith(("eies", "aies")):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("es") and not word.endswith(("aes", "ees", "oes")):
        return word[:-1]
    if len(word) > 2 and word.endswith("s") and not word.endswith(("us", "ss")):
        return word[:-1]
    return word


def analyze(text: str) -> list[str]:
    text = re.sub(r"'s\b", "", text.lower())  # Lucene's English possessive filter
    return [_stem(w) for w in re.findall(r"[a-z0-9]+", text) if w not in _LUCENE_STOPWORDS]


def search_document(product: dict) -> str:
    options = ", and ".join(f"{name}: {', '.join(values)}" for name, values in product["options"].items())
    bullet = product["BulletPoints"][0] if product["BulletPoints"] else ""
    return " ".join([product["Title"], product["Description"], bullet, options]).lower()


class Catalogue:
    """The products by ASIN and a BM25 index over their search documents."""

    def __init__(self, products: list[dict]):
        self.products = {p["asin"]: p for p in products}
        self._asins = [p["asin"] for p in products]
        self._postings: dict[str, list[tuple[int, int]]] = defaultdict(list)
        self._lengths: list[int] = []
        for i, product in enumerate(products):
            counts = Counter(analyze(search_document(product)))
            self._lengths.append(sum(counts.values()))
            for term, tf in counts.items():
                self._postings[term].append((i, tf))
        self._avgdl = sum(self._lengths) / max(1, len(self._lengths))

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[str]:
        """The k best-scoring ASINs of the products matching any query term; ties in catalogue order (Lucene's
        doc-id order). A repeated query term counts as often as it appears, as in Pyserini's bag of words."""
        n, scores = len(self._asins), defaultdict(float)
        for term, boost in Counter(analyze(query)).items():
            postings = self._postings.get(term, [])
            idf = math.log(1 + (n - len(postings) + 0.5) / (len(postings) + 0.5))
            for i, tf in postings:
                norm = BM25_K1 * (1 - BM25_B + BM25_B * self._lengths[i] / self._avgdl)
                scores[i] += boost * idf * tf / (tf + norm)
        return [self._asins[i] for i in sorted(scores, key=lambda i: (-scores[i], i))[:k]]


# ---- the text environment (SimServer + WebAgentTextEnv in text mode)


def parse_action(action: str) -> tuple[str, str | None]:
    """engine.parse_action: "name[arg]" → (name, arg); anything else → (action, None)."""
    m = re.match(r"(.+)\[(.+)\]", action)
    return (m.group(1), m.group(2)) if m else (action, None)


class WebShopEnv:
    """One shopping session for one goal. reset() → observation; step(action) → (observation, reward, done, info).
    reward is 0 until "click[buy now]", which ends the episode with WebShop's score of the purchase; info["won"]
    says whether that score is 1 (WebShop's success), info["reward_info"] how it came about."""

    def __init__(self, catalogue: Catalogue, goal: dict):
        self.catalogue, self.goal = catalogue, goal
        self.reset()

    def reset(self) -> str:
        self.page = "search"  # search, results, item, a SUB_PAGES entry, or done
        self.results: list[str] = []  # the last search's ASINs
        self.page_num = 1
        self.asin: str | None = None
        self.options: dict[str, str] = {}
        self.reward, self.reward_info = 0.0, {}
        return self.observation()

    def _page(self) -> tuple[list[str], dict[str, tuple[str, str]]]:
        """The page's visible texts in document order and its clickables: lowercased text → (kind, value)."""
        head = ["Instruction:", self.goal["instruction_text"]]
        back = {"back to search": ("button", ""), "< prev": ("button", "")}
        if self.page == "search":
            return ["WebShop", *head, "Search"], {"search": ("button", "")}
        if self.page == "done":
            return ["Thank you for shopping with us!", "Your score (min 0.0, max 1.0)", str(self.reward)], {}
        if self.page == "results":
            shown = self.results[(self.page_num - 1) * PRODUCT_WINDOW : self.page_num * PRODUCT_WINDOW]
            texts = [*head, "Back to Search", f"Page {self.page_num} (Total results: {len(self.results)})"]
            clickables = {"back to search": ("button", "")}
            if self.page_num > 1:
                texts.append("< Prev")
                clickables["< prev"] = ("button", "")
            if self.page_num * PRODUCT_WINDOW < len(self.results):
                texts.append("Next >")
                clickables["next >"] = ("button", "")
            for asin in shown:
                product = self.catalogue.products[asin]
                texts += [asin, product["Title"], product["Price"]]
                clickables[asin.lower()] = ("product", asin)
            return texts, clickables
        product = self.catalogue.products[self.asin]
        texts = [*head, "Back to Search", "< Prev"]
        if self.page == "item":
            clickables = {
                **back,
                **{b.lower(): ("button", "") for b in ("Description", "Features", "Reviews", "Buy Now")},
            }
            for name, values in product["options"].items():
                texts += [name, *values]
                clickables.update({v: ("option", name) for v in values})  # options last: they win clashes
            texts += [
                product["Title"],
                f"Price: {product['Price']}",
                "Rating: N.A.",  # no ratings published
                "Description",
                "Features",
                "Reviews",
                "Buy Now",
            ]
            return texts, clickables
        if self.page == "description":
            texts.append(product["Description"])
        elif self.page == "features":
            texts += product["BulletPoints"]
        else:  # the published data has no reviews: engine.load_products leaves every product's list empty
            texts.append("No reviews found")
        return texts, back

    def available_actions(self) -> dict[str, Any]:
        """WebAgentTextEnv.get_available_actions: whether the page has the search bar, and its clickables."""
        _, clickables = self._page()
        return {"has_search_bar": self.page == "search", "clickables": list(clickables)}

    def page_text(self) -> str:
        """The page as WebAgentTextEnv's text mode shows it: its visible texts joined by [SEP]."""
        return " [SEP] ".join(t.strip() for t in self._page()[0] if t.strip())

    def observation(self) -> str:
        page, (_, clickables) = self.page_text(), self._page()
        actions = ["search[<your query>]"] if self.page == "search" else [f"click[{c}]" for c in clickables]
        return f"{page}\nAvailable actions: {', '.join(actions)}" if actions else page

    def step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        """Like WebAgentTextEnv.step: search[...] works on any page, click[...] only on the page's clickables
        (case-insensitive); anything else leaves the page as it is. The purchase ends the episode."""
        reward, valid = 0.0, False
        if self.page != "done":
            name, arg = parse_action(action)
            arg = arg.lower() if arg is not None else None
            _, clickables = self._page()
            if name == "search" and arg:
                self._search(arg)
                valid = True
            elif name == "click" and arg in clickables and arg != "search":
                reward = self._click(arg, *clickables[arg])
                valid = True
        done = self.page == "done"
        info: dict[str, Any] = {"won": done and self.reward == 1.0, "reward": self.reward, "valid": valid}
        if done:
            info["reward_info"] = self.reward_info
        return self.observation(), reward, done, info

    def _search(self, query: str) -> None:
        self.results, self.page_num, self.page = self.catalogue.search(query), 1, "results"
        self.asin, self.options = None, {}

    def _click(self, key: str, kind: str, value: str) -> float:
        """SimServer.receive's branches, in its order; the purchase's reward, else 0."""
        if key == "buy now":
            product = self.catalogue.products[self.asin]
            self.reward, self.reward_info = get_reward(product, self.goal, product["price"], self.options)
            self.page = "done"
            return self.reward
        if key == "back to search":
            self.reset()
        elif key == "next >" and self.page == "results":
            self.page_num += 1
        elif key == "< prev" and self.page == "results":
            self.page_num -= 1
        elif key == "< prev" and self.page in SUB_PAGES:
            self.page = "item"
        elif key == "< prev" and self.page == "item":
            self.page, self.asin, self.options = "results", None, {}
        elif key in SUB_PAGES:
            self.page = key
        elif kind == "product":
            self.page, self.asin = "item", value
        elif kind == "option":
            self.options[value] = key
        return 0.0


# ---- protocol `paper`: the reference's prompt and action clean-up


def paper_messages(
    env: WebShopEnv, history: list[tuple[str, str]], observation: str, history_window: int = 5
) -> list[dict[str, str]]:
    """The reference's chat for the next action: the instruction, the page's available actions, the last
    `history_window` (action, observation) steps numbered from the start, and the current observation."""
    avail = env.available_actions()
    actions = (["search[<your query>]"] if avail["has_search_bar"] else []) + [
        f"click[{c}]" for c in avail["clickables"]
    ]
    prompt = (
        "You are shopping on an e-commerce website. Find and purchase a product matching the user's "
        f"instruction.\n\nInstruction: {env.goal['instruction_text']}\n\nAvailable actions:\n"
        + "\n".join(f"  {a}" for a in actions)
        + "\n\n"
        + PAPER_RULES
    )
    offset = max(0, len(history) - history_window)
    for step, (action, obs) in enumerate(history[offset:], offset + 1):
        prompt += f"\nObservation {step}: {obs}\nAction {step}: {action}\n"
    prompt += f"\nObservation {len(history) + 1}: {observation}\nAction {len(history) + 1}:"
    return [{"role": "system", "content": PAPER_SYSTEM}, {"role": "user", "content": prompt}]


def paper_action(completion: str) -> str:
    """The reference's clean-up of a completion (cut at its first newline): stripped, without an "Action:"
    prefix, choose[...] read as click[...]."""
    action = completion.split("\n", 1)[0].strip()
    if action.startswith("Action:"):
        action = action[7:].strip()
    return "click[" + action[7:] if action.startswith("choose[") else action


class PaperTranscript(Transcript):
    """Protocol `paper`'s loop for one goal (the reference's webshop_run): paper_messages over the page texts (not
    the observation with its action list: the prompt lists the actions itself), rendered with the policy's chat
    template; the action is paper_action of the completion."""

    max_new_tokens = MAX_NEW_TOKENS["paper"]

    def __init__(self, env: WebShopEnv, history_window: int = HISTORY_WINDOW):
        env.reset()
        self.env, self.window, self.observation = env, history_window, env.page_text()
        self.history: list[tuple[str, str]] = []  # (action, the page it led to)
        self.done, self.won, self.reward = False, False, 0.0

    actions = property(lambda self: [a for a, _ in self.history])

    def prompt(self, render: Render, fits: Fits | None = None) -> str:
        return render(paper_messages(self.env, self.history, self.observation, self.window))

    read = staticmethod(paper_action)

    def reply(self, action: str) -> str:
        return f"{action}\n"

    def step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        observation, reward, done, info = self.env.step(action)
        self.observation = self.env.page_text()
        self.history.append((action, self.observation))
        self.done, self.won = done, bool(info["won"])
        if done:
            self.reward = reward
        return observation, reward, done, info


def goal_transcript(env: WebShopEnv, protocol: str, history_window: int = HISTORY_WINDOW) -> Transcript:
    """A goal's episode in `env` (reset here) as the protocol's loop prompts for it."""
    if protocol == "paper":
        return PaperTranscript(env, history_window)
    if protocol == "a2rl":
        return ReactTranscript(env, HEADER, MAX_NEW_TOKENS["a2rl"])
    raise ValueError(f"webshop: unknown protocol {protocol!r} (paper or a2rl)")


def load_catalogue(data_dir: str | Path | None = None) -> Catalogue:
    """The products (products.jsonl next to this file in the workspace)."""
    path = Path(data_dir or Path(__file__).parent) / "products.jsonl"
    return Catalogue([json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()])


def load_goals(data_dir: str | Path | None = None, name: str = "goals.jsonl") -> list[dict]:
    """The goals (goals.jsonl next to this file in the workspace): the instruction and what the reward checks."""
    path = Path(data_dir or Path(__file__).parent) / name
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@functools.lru_cache(maxsize=4)
def _shop(data_dir: str) -> tuple[Catalogue, list[dict]]:
    return load_catalogue(data_dir), load_goals(data_dir)


def train_episodes(data_dir: str | Path) -> list[str]:
    """The common protocol (a2rl/tasklib/envs.py): a training episode is a goal's index in goals.jsonl."""
    return [str(i) for i in range(len(_shop(str(data_dir))[1]))]


def make_env(data_dir: str | Path, episode: str) -> WebShopEnv:
    catalogue, goals = _shop(str(data_dir))
    return WebShopEnv(catalogue, goals[int(episode)])


def transcript(data_dir: str | Path, episode: str, protocol: str, env: WebShopEnv | None = None) -> Transcript:
    """The common protocol: a training goal as the protocol's grader loop prompts for it (env: reused, reset)."""
    return goal_transcript(env or make_env(data_dir, episode), protocol)


def rollout(
    policy_fn: Callable[[str], str], catalogue: Catalogue, goal: dict, *, max_steps: int = 50, fits: Fits | None = None
) -> Episode:
    """Shop for one goal with a prompt → completion policy and the grader's prompt; episode.won is success."""
    return _rollout(policy_fn, WebShopEnv(catalogue, goal), HEADER, max_steps=max_steps, fits=fits)
