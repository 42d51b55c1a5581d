"""Prepare webshop: WebShop's 1,000-product shop and its human instructions; the grader plays goals 0–99.

Upstream files (princeton-nlp/WebShop `setup.sh -d small`, on Google Drive), read from `source` when given:
items_shuffle_1000.json (raw products), items_ins_v2_1000.json (attributes per ASIN) and items_human_ins.json
(crowd-sourced instructions per ASIN). This ports engine.load_products and goal.get_human_goals, then orders the
goals as SimServer does (random.seed(233); random.shuffle), so goal i is the instruction that
`WebAgentTextEnv(num_products=1000, human_goals=True).reset(session=i)` poses. Upstream draws each product's price
(within its range) and each goal's price cap from the unseeded global random; here they come from
random.Random(SEED) in the same order of calls, so every preparation agrees. (The reference builds
WebAgentTextEnv(num_products=1000) without human_goals, which makes SimServer pose synthetic goals instead: those are
ported too, as goal.get_synthetic_goals builds them from items_ins_v2's instructions, one per combination of the
product's options, in SimServer's order; protocol `paper` grades synthetic goals 0–99.)

WebShop's human demonstrations (the imitation-learning data of its paper: baseline_models/data/
il_trajs_finalized_images.zip in its repository, downloaded at a pinned commit and checked against the zip's git blob
id; with `source`, the unzipped il_trajs_finalized_images.jsonl there, and when `source` lacks it the scripted expert
alone, with a one-line notice) become train trajectories: each is matched to the training goal with its instruction
(compared as upstream's IL scripts compare them, without the price cap) and replayed in env.py; one whose action a
page does not admit (our BM25 search lists other products than upstream's Lucene index), or that stops short of
the purchase, is dropped. Prepare prints one line counting what it wrote and dropped. The real file has not been
downloaded from this machine: only a made-up fixture in its format has been converted.

train/: products.jsonl (the shop), goals.jsonl (every human goal but the graded ones and any other asking a graded
instruction), env.py and react.py (the environment and the grader's ReAct loop) and trajectories.jsonl: per training
goal, its human demonstrations that replay (source "human", won or not as replayed), else a scripted expert's episode
(source "scripted_expert"); no trajectory for a training goal whose instruction is a graded goal's (human or synthetic).
heldout/: products.jsonl, goals.jsonl (human goals 0–99, protocol `a2rl`) and synthetic_goals.jsonl (synthetic goals
0–99, protocol `paper`).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
import re
import shutil
import sys
import tempfile
import urllib.request
import zipfile
from collections import Counter, defaultdict
from pathlib import Path

import a2rl.tasklib.envs
from a2rl.tasklib.taskdata import write_jsonl

FILES = {  # setup.sh's Google Drive ids
    "items_shuffle_1000.json": "1EgHdxQ_YxqIQlvvq5iKlCrkEKR6-j0Ib",
    "items_ins_v2_1000.json": "1IduG0xl544V_A_jv3tHXC0kyFi7PnyBu",
    "items_human_ins.json": "14Kb5SPBk_jfdLZ_CDBNitW98QLDlKR5O",
}
URL = "https://drive.usercontent.google.com/download?id={}&export=download&confirm=t"
# WebShop's human demonstrations (its paper's imitation-learning data), committed to its repository as a zip holding
# one JSON object per trajectory: `states` (the pages, states[0] the instruction's), `actions`, `available_actions`,
# `action_idxs`, ... Pinned to a commit; IL_BLOB is the zip's git blob id in that commit's tree (read from a mirror
# of the repository, whose copy lacked the zip's bytes: the bytes' SHA-256 could not be computed here, and the
# download has not been exercised from this machine).
IL_FILE = "il_trajs_finalized_images.jsonl"
IL_URL = (
    "https://raw.githubusercontent.com/princeton-nlp/WebShop/64fa2a5c15c7daa698b9ac93f5bb5437b634c9bd/"
    "baseline_models/data/il_trajs_finalized_images.zip"
)
IL_BLOB = "36da904c4223b5ee53f49c22201c5772144f6bc3"
NUM_PRODUCTS = 1000  # the reference's num_products
N_HELDOUT = 100  # graded goals: 0..N_HELDOUT-1
SEED = 233  # prices and price caps; the goal order uses SimServer's own seed, also 233
PRICE_RANGE = [10.0 * i for i in range(1, 100)]  # goal.py
EXPERT_PAGES = 5  # result pages the expert turns before giving up on finding the goal's product

ws = a2rl.tasklib.envs.load_module(Path(__file__).with_name("env.py"), "a2rl_task_webshop_env")


def download(url: str, path: Path) -> None:
    urllib.request.urlretrieve(url, path)


def read(name: str, source: Path | None, tmp: Path):
    """An upstream JSON file: under `source`, or downloaded into `tmp`."""
    path = Path(source) / name if source is not None else tmp / name
    if source is None:
        download(URL.format(FILES[name]), path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise RuntimeError(
            f"{name} is not JSON (Google Drive may have refused the download): fetch it as "
            f"WebShop's setup.sh does and run `a2rl prepare webshop --source <its folder>`"
        ) from e


def load_products(raw: list[dict], attributes: dict, rng: random.Random) -> list[dict]:
    """engine.load_products(num_products=1000, human_goals=True) and generate_product_prices: the first
    NUM_PRODUCTS raw products bar bad or repeated ASINs, with what the pages and the reward read."""
    products, seen = [], set()
    for p in raw[:NUM_PRODUCTS]:
        asin = p["asin"]
        if asin == "nan" or len(asin) > 10 or asin in seen:
            continue
        seen.add(asin)
        pricing = [float(re.sub(r"[^\d.]", "", x)) for x in (p.get("pricing") or "").split("$")[1:]][:2] or [100.0]
        options = {
            name.lower(): [o["value"].strip().replace("/", " | ").lower() for o in values]
            for name, values in (p["customization_options"] or {}).items()
            if values is not None
        }
        small = p["small_description"]
        products.append(
            {
                "asin": asin,
                "name": p["name"],
                "Title": p["name"],
                "Description": p["full_description"],
                "BulletPoints": small if isinstance(small, list) else [small],
                "Price": f"${pricing[0]}" if len(pricing) == 1 else f"${pricing[0]} to ${pricing[1]}",
                "pricing": pricing,
                "options": options,
                "Attributes": attributes.get(asin, {}).get("attributes") or ["DUMMY_ATTR"],
                "category": p["category"],
                "query": p["query"].lower().strip(),
                "product_category": p["product_category"],
            }
        )
    for product in products:  # generate_product_prices: one draw per ranged product, in catalogue order
        product["price"] = product["pricing"][0] if len(product["pricing"]) == 1 else rng.uniform(*product["pricing"])
    return products


def human_goals(products: list[dict], human: dict, rng: random.Random) -> list[dict]:
    """goal.get_human_goals, in WebShop's order (SimServer shuffles with seed 233)."""
    goals = []
    for product in products:
        for ins in human.get(product["asin"], []):
            if not ins["instruction_attributes"]:
                continue  # upstream skips instructions without attributes
            price_upper, price_text = price_cap(product["price"], rng)
            goals.append(
                {
                    "asin": product["asin"],
                    "category": product["category"],
                    "query": product["query"],
                    "name": product["name"],
                    "product_category": product["product_category"],
                    "instruction_text": ins["instruction"].strip(".") + price_text,
                    "attributes": ins["instruction_attributes"],
                    "price_upper": price_upper,
                    "goal_options": ins["instruction_options"],
                }
            )
    random.Random(233).shuffle(goals)
    return goals


def price_cap(price: float, rng: random.Random) -> tuple[float, str]:
    """goal.py's price cap of a goal for a product at `price`, and the text the instruction ends with."""
    price_range = [p for p in PRICE_RANGE if p > price][:4]
    if len(price_range) < 2:
        return 1000000, ""
    _, price_upper = sorted(rng.sample(price_range, 2))
    return price_upper, f", and price lower than {price_upper:.2f} dollars"


def synthetic_goals(products: list[dict], attributes: dict, rng: random.Random) -> list[dict]:
    """goal.get_synthetic_goals over engine.load_products(human_goals=False), in SimServer's order (seed 233):
    items_ins_v2's instruction with every combination of the product's options; goal_options is a dict."""
    goals = []
    for product in products:
        entry = attributes.get(product["asin"], {})  # upstream raises KeyError on a product missing here
        if entry.get("instruction") is None:
            continue
        price_upper, price_text = price_cap(product["price"], rng)  # one draw per product, as upstream
        names = sorted(product["options"])
        for combination in itertools.product(*(product["options"][n] for n in names)):
            options = dict(zip(names, combination))
            option_text = ", and ".join(f"{k}: {v}" for k, v in options.items())
            goals.append(
                {
                    "asin": product["asin"],
                    "category": product["category"],
                    "query": product["query"],
                    "name": product["Title"],
                    "product_category": product["product_category"],
                    "instruction_text": entry["instruction"]
                    + (f" with {option_text}" if option_text else "")
                    + price_text,
                    "attributes": entry["instruction_attributes"],
                    "price_upper": price_upper,
                    "goal_options": options,
                }
            )
    random.Random(233).shuffle(goals)
    return goals


def split(goals: list[dict], graded_elsewhere: list[dict]) -> tuple[list[dict], list[dict]]:
    """(train, graded): goals 0..N_HELDOUT-1 are graded; train drops every other goal whose instruction is a graded
    one's, of any product (the human data repeats a few instructions), or one of `graded_elsewhere`'s (the
    synthetic goals the `paper` protocol grades)."""
    if len(goals) <= N_HELDOUT:
        raise ValueError(f"the source yields {len(goals)} goals; grading {N_HELDOUT} leaves none to train on")
    graded = goals[:N_HELDOUT]
    taken = {instruction_key(g["instruction_text"]) for g in graded + graded_elsewhere}
    return [g for g in goals[N_HELDOUT:] if instruction_key(g["instruction_text"]) not in taken], graded


def expert_episode(env, goal: dict) -> a2rl.tasklib.envs.Episode:
    """A scripted expert who knows the goal's product: search the instruction, turn result pages until the product
    shows, open it, click each option value the goal asks for (as goal.py matches them), buy. Training goals only."""
    actions = [f"search[{goal['instruction_text'].split(', and price lower than ')[0]}]"]
    env.reset()
    env.step(actions[0])
    asin = goal["asin"].lower()
    for _ in range(EXPERT_PAGES):
        clickables = env.available_actions()["clickables"]
        if asin in clickables or "next >" not in clickables:
            break
        actions.append("click[next >]")
        env.step(actions[-1])
    actions.append(f"click[{asin}]")
    values = [v for vs in env.catalogue.products[goal["asin"]]["options"].values() for v in vs]
    for wanted in goal["goal_options"]:
        match = next((v for v in values if ws.option_matches([v], [wanted])), None)
        if match is not None:
            actions.append(f"click[{match}]")
    actions.append("click[buy now]")
    return a2rl.tasklib.envs.replay(env, actions)


def git_blob_id(path: Path) -> str:
    """The id git gives a file's bytes: SHA-1 of "blob <size>\\0" and the bytes."""
    digest = hashlib.sha1(b"blob %d\0" % path.stat().st_size)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def il_file(source: Path | None, tmp: Path) -> Path | None:
    """The human demonstrations' JSONL: under `source` (unzipped, as WebShop's baseline_models/README.md leaves it)
    or downloaded into `tmp`, its git blob id checked and the JSONL taken out of the zip; None if `source` lacks it."""
    if source is not None:
        path = Path(source) / IL_FILE
        return path if path.is_file() else None
    archive = tmp / "il_trajs.zip"
    download(IL_URL, archive)
    if (blob := git_blob_id(archive)) != IL_BLOB:
        raise RuntimeError(
            f"{IL_URL} downloaded with git blob id {blob}, not the pinned {IL_BLOB}: fetch it by hand, "
            f"unzip {IL_FILE} next to the other files and run `a2rl prepare webshop --source <folder>`"
        )
    with zipfile.ZipFile(archive) as z:
        member = next((n for n in z.namelist() if n.split("/")[-1] == IL_FILE and "__MACOSX" not in n), None)
        if member is None:
            raise RuntimeError(f"{IL_URL} holds no {IL_FILE}")
        with z.open(member) as src, open(tmp / IL_FILE, "wb") as dst:
            shutil.copyfileobj(src, dst)
    return tmp / IL_FILE


def instruction_key(text: str) -> str:
    """An instruction as WebShop's IL scripts compare them (process_goal): lowercased, quotes dropped, without the
    first page's title and search button (so a demonstration's states[0] gives its instruction) or the price cap,
    which upstream drew afresh for every session."""
    text = text.lower().replace('"', "").replace("'", "")
    text = re.sub(r"^\s*(webshop|amazon shopping game)\ninstruction:", "", text)
    text = text.replace("\n[button] search [button_]", "")
    return text.split(", and price lower than")[0].strip()


def demo_actions(record: dict) -> list[str] | None:
    """A demonstration's recorded actions in our env's syntax (search[query], click[lowercased target]); None
    if one is neither."""
    actions = []
    for action in record.get("actions") or []:
        name, arg = ws.parse_action(action.strip())
        if name not in ("search", "click") or arg is None:
            return None
        actions.append(f"search[{arg.strip()}]" if name == "search" else f"click[{arg.strip().lower()}]")
    return actions or None


def read_demos(path: Path) -> list[tuple[str, list[str] | None]]:
    """(instruction key, actions) per demonstration, read line by line (the file carries image features too)."""
    with open(path, encoding="utf-8") as f:
        return [(instruction_key(r["states"][0]), demo_actions(r)) for r in map(json.loads, f) if r.get("states")]


def human_trajectories(
    train_dir: Path, demos: list[tuple[str, list[str] | None]], held: set[str]
) -> tuple[dict[int, list[dict]], Counter]:
    """Each demonstration's episode on the training goal with its instruction (the goal of the product it opens,
    when several share it), by goal index; and counts of what was written and why the rest were dropped. A
    demonstration for an instruction in `held` (the graded goals') is never replayed; one that does not replay here
    (an action the page does not admit: our search ranks differently, or actions after or short of the purchase)
    is dropped."""
    goals = ws.load_goals(train_dir)
    by_key: dict[str, list[int]] = defaultdict(list)
    for i, goal in enumerate(goals):
        by_key[instruction_key(goal["instruction_text"])].append(i)
    written: dict[int, list[dict]] = defaultdict(list)
    counts: Counter = Counter()
    for key, actions in demos:
        if key in held:
            counts["for a graded instruction"] += 1
            continue
        if key not in by_key:
            counts["for no training goal"] += 1
            continue
        if actions is None:
            counts["with an action other than search or click"] += 1
            continue
        i = next((c for c in by_key[key] if f"click[{goals[c]['asin'].lower()}]" in actions), by_key[key][0])
        try:
            episode = a2rl.tasklib.envs.replay(ws.make_env(train_dir, str(i)), actions, strict=True)
        except ValueError:
            episode = None
        if episode is None or not episode.done or len(episode.actions) < len(actions):
            counts["not replaying here"] += 1
            continue
        written[i].append(a2rl.tasklib.envs.trajectory_record(str(i), episode, ws.HEADER, "human"))
        counts["written"] += 1
    return written, counts


def trajectories(train_dir: Path, demos: list[tuple[str, list[str] | None]] | None, graded: list[dict]) -> list[dict]:
    """Per training goal, its human demonstrations that replay, else the scripted expert's episode; none for a goal
    whose instruction is a graded goal's. `demos` None: the demonstrations were not available."""
    held = {instruction_key(g["instruction_text"]) for g in graded}
    human, counts = human_trajectories(train_dir, demos or [], held)
    goals, records = ws.load_goals(train_dir), []
    for e in ws.train_episodes(train_dir):
        if instruction_key(goals[int(e)]["instruction_text"]) in held:
            continue
        records += human.get(int(e)) or [
            a2rl.tasklib.envs.trajectory_record(
                e, expert_episode(ws.make_env(train_dir, e), goals[int(e)]), ws.HEADER, "scripted_expert"
            )
        ]
    scripted = sum(r["source"] == "scripted_expert" for r in records)
    if demos is None:
        print(
            f"webshop prepare: no {IL_FILE} in the source folder: the scripted expert plays all {scripted} "
            "training goals (no human demonstrations)",
            file=sys.stderr,
        )
    else:
        dropped = ", ".join(f"{n} {why}" for why, n in sorted(counts.items()) if why != "written") or "none"
        print(
            f"webshop prepare: {counts['written']} of {len(demos)} human demonstrations written for {len(human)} "
            f"training goals (dropped: {dropped}); the scripted expert plays the other {scripted}",
            file=sys.stderr,
        )
    return records


def prepare(train_dir: Path, heldout_dir: Path, source: Path | None = None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        raw, attributes, human = (read(name, source, Path(tmp)) for name in FILES)
        demos_path = il_file(source, Path(tmp))
        demos = read_demos(demos_path) if demos_path is not None else None
    rng = random.Random(SEED)
    products = load_products(raw, attributes, rng)
    after_prices = rng.getstate()  # each goal set draws its price caps after the prices, as in its own SimServer
    goals = human_goals(products, human, rng)
    rng.setstate(after_prices)
    graded_synthetic = synthetic_goals(products, attributes, rng)[:N_HELDOUT]
    train, graded = split(goals, graded_synthetic)
    for directory, goals in ((Path(train_dir), train), (Path(heldout_dir), graded)):
        write_jsonl(directory / "products.jsonl", products)
        write_jsonl(directory / "goals.jsonl", goals)
    write_jsonl(Path(heldout_dir) / "synthetic_goals.jsonl", graded_synthetic)
    shutil.copyfile(Path(__file__).with_name("env.py"), Path(train_dir) / "env.py")
    shutil.copyfile(a2rl.tasklib.envs.__file__, Path(train_dir) / "react.py")
    write_jsonl(Path(train_dir) / "trajectories.jsonl", trajectories(Path(train_dir), demos, graded + graded_synthetic))
