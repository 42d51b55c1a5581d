"""WebShop: prepare ports WebShop's product loading and human goals, read from fixtures in the upstream JSON
formats (the download itself is replaced); the standard-library environment follows WebAgentTextEnv's text pages
and goal.py's reward; the evaluator's protocol `a2rl` counts only reward 1 as a success (protocol `paper`:
tests/test_protocol_webshop.py)."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
import zipfile
from math import isclose
from pathlib import Path
from types import SimpleNamespace

import pytest

from a2rl.spec.tasks import get_task
from a2rl.tasklib.envs import load_module
from a2rl.tasklib.evaluator import load_evaluator
from fakes import FakeGenerator

FIXTURES = Path(__file__).parent / "fixtures" / "webshop"  # a few rows of each upstream file, same format
TASK = get_task("webshop")
PREP = load_module(TASK.folder / "prepare.py", "a2rl_task_webshop_prepare")
EVAL = load_evaluator(TASK)
ws = EVAL.ws
N_HELDOUT = 3  # of the fixture's 9 usable goals


def _prepare(root: Path, source: Path | None = FIXTURES) -> SimpleNamespace:
    (root / "train").mkdir(parents=True)
    (root / "heldout").mkdir()
    held, PREP.N_HELDOUT = PREP.N_HELDOUT, N_HELDOUT
    try:
        PREP.prepare(root / "train", root / "heldout", **({"source": source} if source else {}))
    finally:
        PREP.N_HELDOUT = held
    return SimpleNamespace(
        train=root / "train",
        heldout=root / "heldout",
        catalogue=ws.load_catalogue(root / "heldout"),
        graded=ws.load_goals(root / "heldout"),
        goals=ws.load_goals(root / "train"),
    )


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> SimpleNamespace:
    return _prepare(tmp_path_factory.mktemp("webshop"))


# ---- prepare


def test_products_are_loaded_as_webshop_loads_them(prepared):
    products = prepared.catalogue.products
    assert list(products) == [
        "B078GWRC1J",
        "B078GTKVXY",
        "B08KBVJ4XN",
        "B09HXC4L2M",
        "B08R9QMW1L",
        "B07ZK5X3PQ",
        "B01N5QFZ3K",
    ]  # 'nan', an 11+ character ASIN and a repeated ASIN are skipped
    deo, shoes, hair, bottle = (products[a] for a in ("B078GWRC1J", "B09HXC4L2M", "B08R9QMW1L", "B01N5QFZ3K"))
    assert deo["Title"].startswith("Bright Citrus") and deo["query"] == "deodorant"  # query lowercased, stripped
    assert (deo["Price"], deo["price"]) == ("$10.99", 10.99)
    assert deo["options"]["size"] == ["travel set (4-pack)", "3 ounce (pack of 1)", "3-ounce (2-pack)"]
    assert shoes["options"] == {"color": ["black | white", "navy blue", "grey"], "size": ["8", "9", "10", "11"]}
    assert shoes["Price"] == "$29.99 to $39.99" and 29.99 <= shoes["price"] <= 39.99  # a draw within the range
    assert hair["BulletPoints"] == ["Clip in hair extensions that look natural"]  # a lone string becomes a list
    assert (bottle["Price"], bottle["price"], bottle["options"]) == ("$100.0", 100.0, {})  # no pricing: $100
    assert bottle["Attributes"] == ["DUMMY_ATTR"]  # no entry in items_ins_v2
    assert deo["Attributes"] == ["sensitive skin", "natural ingredients", "aluminum free", "paraben free"]


def test_goals_follow_webshops_order_and_goals_0_to_2_are_graded(prepared):
    human = json.loads((FIXTURES / "items_human_ins.json").read_text())
    products = prepared.catalogue.products
    in_order = [
        (asin, i["instruction"].strip("."))
        for asin in products
        for i in human.get(asin, [])
        if i["instruction_attributes"]
    ]
    state = random.getstate()
    random.seed(233)  # what SimServer does before shuffling its goals
    random.shuffle(in_order)
    random.setstate(state)
    graded = [(g["asin"], g["instruction_text"].split(", and price lower than")[0]) for g in prepared.graded]
    assert graded == in_order[:N_HELDOUT]
    for goal in prepared.graded + prepared.goals:
        price = products[goal["asin"]]["price"]
        assert goal["price_upper"] in PREP.PRICE_RANGE and price < goal["price_upper"] <= price + 40
        assert goal["instruction_text"].endswith(f", and price lower than {goal['price_upper']:.2f} dollars")
        assert goal["name"] == products[goal["asin"]]["name"] and goal["attributes"]
    assert len(prepared.graded) == N_HELDOUT and len(prepared.goals) == 5  # 9 usable goals, one repeats a graded one


def test_no_graded_instruction_reaches_train(prepared):
    assert all((prepared.train / f).is_file() for f in TASK.spec.train_files)
    visible = "".join(p.read_text() for p in prepared.train.iterdir())
    for goal in prepared.graded:
        assert goal["instruction_text"].split(", and price lower than")[0] not in visible
    assert (prepared.train / "products.jsonl").read_text() == (prepared.heldout / "products.jsonl").read_text()
    synthetic = [json.loads(line) for line in (prepared.heldout / "synthetic_goals.jsonl").read_text().splitlines()]
    graded = {PREP.instruction_key(g["instruction_text"]) for g in prepared.graded + synthetic}
    assert not graded & {PREP.instruction_key(g["instruction_text"]) for g in prepared.goals}


def test_a_graded_instruction_is_dropped_from_train_whatever_its_product():
    def goal(asin: str, text: str) -> dict:
        return {"asin": asin, "instruction_text": f"{text}, and price lower than 30.00 dollars"}

    held, PREP.N_HELDOUT = PREP.N_HELDOUT, 1
    try:
        train, graded = PREP.split(
            [
                goal("A", "i need red socks"),
                goal("B", "I need red socks"),
                goal("C", "i want a blue hat"),
                goal("D", "i want a lamp"),
            ],
            [goal("E", "i want a blue hat")],
        )
    finally:
        PREP.N_HELDOUT = held
    assert [g["asin"] for g in graded] == ["A"] and [g["asin"] for g in train] == ["D"]


def il_zip(folder: Path) -> tuple[Path, str]:
    """The fixture's demonstrations zipped as WebShop commits them, and the zip's git blob id (by git itself)."""
    archive = folder / "il_trajs_finalized_images.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.write(FIXTURES / PREP.IL_FILE, PREP.IL_FILE)
    return archive, subprocess.run(
        ["git", "hash-object", str(archive)], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_prepare_is_deterministic_and_downloads_without_source(tmp_path, monkeypatch, prepared):
    archive, blob = il_zip(tmp_path)
    urls = {PREP.URL.format(file_id): FIXTURES / name for name, file_id in PREP.FILES.items()} | {PREP.IL_URL: archive}
    monkeypatch.setattr(PREP, "download", lambda url, path: shutil.copyfile(urls[url], path))
    monkeypatch.setattr(PREP, "IL_BLOB", blob)
    downloaded = _prepare(tmp_path / "dl", source=None)
    for part, name in [
        ("train", "products.jsonl"),
        ("train", "goals.jsonl"),
        ("train", "trajectories.jsonl"),
        ("heldout", "products.jsonl"),
        ("heldout", "goals.jsonl"),
    ]:
        assert (getattr(downloaded, part) / name).read_text() == (getattr(prepared, part) / name).read_text()

    monkeypatch.setattr(PREP, "download", lambda url, path: path.write_text("<html>quota exceeded</html>"))
    with pytest.raises(RuntimeError, match="--source"):
        _prepare(tmp_path / "refused", source=None)


def test_too_few_goals_for_the_split_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setattr(PREP, "N_HELDOUT", 9)
    with pytest.raises(ValueError, match="9 goals"):
        PREP.prepare(tmp_path, tmp_path, source=FIXTURES)


# ---- reward (goal.py)


@pytest.mark.parametrize(
    "a, b, score",
    [  # values from thefuzz 0.22 / rapidfuzz 3.14
        ("essential oil", "essential oils", 96),
        ("3-ounce (2-pack)", "3 ounce (pack of 1)", 92),
        ("powder snow", "cool powder snow", 100),
        ("tea bag", "tea tree", 60),
        ("lavender", "bright citrus", 10),
        ("travel set (4-pack)", "3 ounce (pack of 1)", 47),
        ("Ünïcode_X", "x", 100),
        ("", "x", 0),
    ],
)
def test_token_set_ratio_is_thefuzzs(a, b, score):
    assert ws.token_set_ratio(a, b) == score


def test_webshops_own_goal_tests():
    """princeton-nlp/WebShop tests/web-agent-site/engine/test_goal.py, except title scores that need spaCy."""
    assert [ws.normalize_color(s) for s in ("", "black forest", "violet lavender", "123alabaster", "webshop")] == [
        "",
        "black",
        "lavender",
        "alabaster",
        "webshop",
    ]
    goal = {"query": "Query 1", "product_category": "a › b › c", "name": "Name 1"}
    bought = dict(goal)
    assert ws.type_reward(bought, goal) == {
        "r_type": 1.0,
        "query_match": True,
        "category_match": True,
        "title_score": 1.0,
    }
    for category, match in [("b › c › a", True), ("d › e › f", False), ("a › d › b", True), ("a › a › d", False)]:
        assert ws.type_reward({**bought, "product_category": category}, goal)["category_match"] is match
    goal["name"], bought["name"] = (
        "adidas Unisex-Adult D.o.n. Issue 2 Basketball Shoe",
        "adidas Unisex-Adult D.o.n. Issue 2 Indoor Court Shoe",
    )
    assert isclose(ws.type_reward(bought, goal)["title_score"], 0.85, abs_tol=1e-2)
    bought["name"] = "Minkissy 2pcs Stainless Steel Eyebrow Tweezers Blackhead Acne Remover Portable Makeup Tweezers"
    assert ws.type_reward(bought, goal)["title_score"] < 0.05

    attrs = ["tea tree", "essential oils", "natural ingredients"]
    empty = {"Title": "", "BulletPoints": [], "Description": ""}
    assert (
        ws.attribute_matches({**empty, "Attributes": ["tea tree", "essential oil", "natural ingredients"]}, attrs) == 3
    )
    assert ws.attribute_matches({**empty, "Attributes": ["essential oil", "natural ingredients"]}, attrs) == 2
    assert (
        ws.attribute_matches(
            {
                "Attributes": [],
                "Title": "",
                "BulletPoints": ["This shampoo has essential oils and smells like lemons"],
                "Description": "Best shampoo on the market, made with natural ingredients",
            },
            attrs,
        )
        == 2
    )
    assert (
        ws.attribute_matches(
            {
                "Attributes": ["tea bag", "earl gray", "lipton"],
                "Title": "English tea for breakfast",
                "BulletPoints": ["Soothing aroma"],
                "Description": "Best tea made by Lipton",
            },
            attrs,
        )
        == 0
    )

    assert ws.option_matches(["pack of 12", "grey", "XL"], ["grey", "XL", "pack of 12"]) == 3
    assert ws.option_matches(["pack of 12", "blue", "XL"], ["grey", "XL", "pack of 12"]) == 2
    assert ws.option_matches(["pack of 12", "powder snow", "XL"], ["cool powder snow", "XL", "pack of 12"]) == 3
    assert ws.option_matches([], ["goal 1", "goal 2"]) == 0

    goal = {
        "query": "Query 1",
        "product_category": "a › b › c",
        "attributes": attrs,
        "price_upper": 40.0,
        "name": "Mens D.O.N. Issue 2 Gca Basketball Sneakers Shoes Casual - Off White",
        "goal_options": {"color": "grey", "size": "XL"},
    }
    bought = {
        "query": "Query 1",
        "product_category": "a › b › c",
        "name": goal["name"],
        "Attributes": ["tea tree", "essential oil", "natural ingredients"],
        **empty,
    }
    options = {"color": "grey", "size": "XL"}
    assert ws.get_reward(bought, goal, 35, options)[0] == 1
    bought.update(
        Attributes=[],
        BulletPoints="This shampoo has essential oils and smells like lemons",  # sic: a str
        Description="Best shampoo on the market, made with natural ingredients",
    )
    assert isclose(ws.get_reward(bought, goal, 35, options)[0], 2 / 3, abs_tol=1e-2)
    goal["goal_options"] = {"color": "grey", "size": "XL", "amount": "pack of 12"}
    assert isclose(ws.get_reward(bought, goal, 35, options)[0], 0.5714, abs_tol=1e-2)
    goal["name"] = "Saireed UL Listed 2 Prong Power Cord for JBL Bar 3.1 Bar 2.1 Channel 4K Ultra HD Soundbar"
    bought.update(
        name="BRST AC Power Cord Outlet Socket Cable Plug Lead for Panasonic SC-HT830V DVD/VCR Combo Home "
        "Theater System",
        query="Query 2",
        product_category="a › d › e",
    )
    assert isclose(ws.get_reward(bought, goal, 35, options)[0], 0.2857, abs_tol=1e-2)


def _goal(prepared, asin: str) -> dict:
    return next(g for g in prepared.graded + prepared.goals if g["asin"] == asin)


def test_reward_of_purchases_against_a_goal(prepared):
    products = prepared.catalogue.products
    goal = _goal(prepared, "B078GWRC1J")  # sensitive skin; bright citrus, 3 ounce (pack of 1)
    deo = products["B078GWRC1J"]
    right = {"scent": "bright citrus", "size": "3 ounce (pack of 1)"}
    assert ws.get_reward(deo, goal, deo["price"], right)[0] == 1.0
    assert ws.get_reward(deo, goal, deo["price"], {**right, "scent": "calming lavender"})[0] == 0.75
    assert ws.get_reward(deo, goal, goal["price_upper"] + 1, right)[0] == 0.75  # over the price cap
    assert ws.get_reward(deo, {**goal, "attributes": ["refillable"]}, deo["price"], right)[0] == 0.75
    reward, info = ws.get_reward(products["B09HXC4L2M"], goal, 30.0, right)  # another type of product
    assert reward < 0.2 and info["r_type"] <= 0.1

    bottle_goal = _goal(prepared, "B01N5QFZ3K")  # one attribute, no options: a product without it scores 0.5
    env = ws.WebShopEnv(prepared.catalogue, {**bottle_goal, "attributes": ["leak proof"]})
    env.reset()
    for action in ("search[stainless steel water bottle]", "click[b01n5qfz3k]"):
        env.step(action)
    obs, reward, done, info = env.step("click[buy now]")
    assert (reward, done, info["won"]) == (0.5, True, False)
    assert obs.endswith("Your score (min 0.0, max 1.0) [SEP] 0.5")


# ---- the text environment (WebAgentTextEnv, observation_mode="text")


def test_text_protocol_from_search_to_purchase(prepared):
    goal = _goal(prepared, "B078GWRC1J")
    env = ws.WebShopEnv(prepared.catalogue, goal)
    instruction = goal["instruction_text"]
    obs = env.reset()
    assert obs == (
        f"WebShop [SEP] Instruction: [SEP] {instruction} [SEP] Search\nAvailable actions: search[<your query>]"
    )
    for invalid in ("click[search]", "search[]", "buy it"):  # the page stays, and info says the action was invalid
        assert env.step(invalid)[0] == obs and not env.step(invalid)[3]["valid"]

    obs, reward, done, info = env.step("search[bright citrus deodorant]")
    page, actions = obs.split("\nAvailable actions: ")
    assert page.startswith(
        f"Instruction: [SEP] {instruction} [SEP] Back to Search [SEP] Page 1 (Total results: 3) "
        "[SEP] B078GWRC1J [SEP] Bright Citrus Deodorant by Earth Mama"
    )
    assert actions == "click[back to search], click[b078gwrc1j], click[b078gtkvxy], click[b08kbvj4xn]"
    assert (reward, done, info) == (0.0, False, {"won": False, "reward": 0.0, "valid": True})
    assert env.available_actions() == {
        "has_search_bar": False,
        "clickables": ["back to search", "b078gwrc1j", "b078gtkvxy", "b08kbvj4xn"],
    }

    obs = env.step("click[B078GWRC1J]")[0]  # clicks are case-insensitive
    assert (
        " [SEP] Back to Search [SEP] < Prev [SEP] scent [SEP] assorted scents [SEP] bright citrus [SEP] "
        "calming lavender"
    ) in obs
    assert (
        " [SEP] Price: $10.99 [SEP] Rating: N.A. [SEP] Description [SEP] Features [SEP] Reviews [SEP] Buy Now\n" in obs
    )
    assert obs.endswith(
        "click[buy now], click[assorted scents], click[bright citrus], click[calming lavender], "
        "click[ginger fresh], click[simply non-scents], click[travel set (4-pack)], "
        "click[3 ounce (pack of 1)], click[3-ounce (2-pack)]"
    )
    item = obs
    assert env.step("click[bright citrus]")[0] == item  # text mode does not show the selection
    assert env.step("click[3-ounce (2-pack)]")[0] == item
    assert env.step("click[3 ounce (pack of 1)]")[0] == item  # a second click in a group replaces the first
    assert env.options == {"scent": "bright citrus", "size": "3 ounce (pack of 1)"}

    sub_page = f"Instruction: [SEP] {instruction} [SEP] Back to Search [SEP] < Prev [SEP] "
    sub_actions = "\nAvailable actions: click[back to search], click[< prev]"
    assert env.step("click[features]")[0] == (
        sub_page + "Earth Mama Deodorant is a safe, natural choice for "
        "sensitive skin [SEP] Aluminum-free, paraben-free" + sub_actions
    )
    assert env.step("click[< prev]")[0] == item
    assert env.step("click[description]")[0] == (
        sub_page + "Our Bright Citrus deodorant keeps you fresh with "
        "organic calendula and essential oils." + sub_actions
    )
    assert env.step("click[< prev]")[0] == item
    assert env.step("click[reviews]")[0] == sub_page + "No reviews found" + sub_actions
    assert env.step("click[< prev]")[0] == item and env.step("click[next >]")[0] == item  # not on this page

    obs, reward, done, info = env.step("click[Buy Now]")
    assert (reward, done, info["won"], info["reward"]) == (1.0, True, True, 1.0)
    assert info["reward_info"] == {
        "r_type": 1.0,
        "query_match": True,
        "category_match": True,
        "title_score": 1.0,
        "r_att": 1.0,
        "r_price": True,
        "r_option": 1.0,
    }
    assert obs == "Thank you for shopping with us! [SEP] Your score (min 0.0, max 1.0) [SEP] 1.0"
    assert env.step("search[anything]") == (obs, 0.0, True, {**info, "valid": False})  # the episode is over


def test_leaving_the_item_page_clears_options_and_back_to_search_restarts(prepared):
    env = ws.WebShopEnv(prepared.catalogue, _goal(prepared, "B09HXC4L2M"))
    env.reset()
    results = env.step("search[running shoes]")[0]
    env.step("click[b09hxc4l2m]")
    env.step("click[navy blue]")
    assert env.step("click[< prev]")[0] == results and env.options == {}
    env.step("click[b09hxc4l2m]")
    env.step("search[hair extensions]")  # search works from any page, as upstream's text env allows
    assert env.page == "results" and env.asin is None
    assert env.step("click[back to search]")[0] == env.reset()


def _widgets(n: int) -> list[dict]:
    return [
        {
            "asin": f"W{i:03d}",
            "name": f"Widget {i}",
            "Title": f"Widget {i}",
            "Description": "a widget",
            "BulletPoints": [],
            "Price": "$1.0",
            "pricing": [1.0],
            "price": 1.0,
            "options": {},
            "Attributes": ["DUMMY_ATTR"],
            "category": "c",
            "query": "widget",
            "product_category": "c",
        }
        for i in range(n)
    ]


def test_results_pages_and_search_ranking():
    catalogue = ws.Catalogue(_widgets(60))
    env = ws.WebShopEnv(catalogue, {"instruction_text": "a widget"})
    env.reset()
    assert "Page 1 (Total results: 50) [SEP] Next > [SEP] W000 [SEP] Widget 0" in env.step("search[widgets]")[0]
    page2 = env.step("click[next >]")[0]
    assert "Page 2 (Total results: 50) [SEP] < Prev [SEP] Next > [SEP] W010" in page2
    for _ in range(3):
        last = env.step("click[next >]")[0]
    assert "Page 5 (Total results: 50) [SEP] < Prev [SEP] W040" in last and "click[next >]" not in last
    for _ in range(3):
        env.step("click[< prev]")
    assert env.step("click[w011]")[0].count("Widget 11") == 1 and env.step("click[< prev]")[0] == page2

    products = _widgets(3)
    products[2].update(Title="Blue Widget Cover", Description="covers for blue widgets")
    products[1].update(Description="the best of its kind")
    catalogue = ws.Catalogue(products)
    assert catalogue.search("blue widget covers") == ["W002", "W000", "W001"]  # stems; ties in catalogue order
    assert catalogue.search("the of with") == [] and catalogue.search("best") == ["W001"]


# ---- the evaluator and the agent's side


def scripted(scripts: dict[str, list[str]]) -> FakeGenerator:
    """Answers each prompt with the next action of a script for the goal its first observation states."""

    def step(prompt: str) -> str:
        instruction = re.search(r"Instruction: \[SEP\] (.*?) \[SEP\] Search", prompt).group(1)
        return f" {scripts[instruction][len(re.findall(r'^Observation: ', prompt, re.M)) - 1]}\nObservation: made up"

    return FakeGenerator(script=step)


def _script(goal: dict, options: list[str], asin: str | None = None) -> list[str]:
    return [
        f"search[{goal['query']}]",
        f"click[{asin or goal['asin']}]",
        *(f"click[{o}]" for o in options),
        "click[buy now]",
    ]


def _wrong_options(catalogue, goal: dict) -> list[str]:
    """For each option group of the goal's product, a value matching none of the goal's options."""
    return (
        [
            next(v for v in values if not ws.option_matches([v], goal["goal_options"]))
            for values in catalogue.products[goal["asin"]]["options"].values()
        ]
        if goal["goal_options"]
        else []
    )


def _evaluate(prepared, scripts: dict[str, list[str]]) -> tuple[dict, FakeGenerator]:
    gen = scripted(scripts)
    return EVAL.evaluate(gen, prepared.heldout, {**TASK.spec.eval, "protocol": "a2rl"}), gen


def test_replaying_winning_purchases_scores_100(prepared):
    result, gen = _evaluate(prepared, {g["instruction_text"]: _script(g, g["goal_options"]) for g in prepared.graded})
    steps = sum(len(g["goal_options"]) + 3 for g in prepared.graded) / N_HELDOUT
    assert result == {
        "score": 100.0,
        "n": N_HELDOUT,
        "successes": N_HELDOUT,
        "success": "reward = 1",
        "reward_1_rate": 100.0,
        "reward_half_rate": 100.0,
        "mean_reward": 1.0,
        "mean_steps": steps,
    }
    assert gen.prompts[0].startswith(ws.HEADER + "\n\nObservation: WebShop [SEP] Instruction: [SEP] ")
    assert gen.prompts[0].endswith(" [SEP] Search\nAvailable actions: search[<your query>]\nAction:")


def test_partial_purchases_are_not_successes(prepared):
    """The right product with the wrong options scores 0.5 (a success by the reference's reward >= 0.5)."""
    scripts = {g["instruction_text"]: _script(g, _wrong_options(prepared.catalogue, g)) for g in prepared.graded}
    result, _ = _evaluate(prepared, scripts)
    optionless = sum(not g["goal_options"] for g in prepared.graded)
    assert optionless == 1 and result["successes"] == optionless
    assert isclose(result["score"], 100 / 3) and isclose(result["mean_reward"], (0.5 + 0.5 + 1.0) / 3)
    assert result["reward_half_rate"] == 100.0  # every success definition is reported


def test_buying_the_wrong_item_scores_0_with_the_mean_reward_reported(prepared):
    scripts = {
        g["instruction_text"]: ["search[hair extensions]", "click[b07zk5x3pq]", "click[buy now]"]
        for g in prepared.graded
    }
    result, _ = _evaluate(prepared, scripts)
    assert result == {
        "score": 0.0,
        "n": N_HELDOUT,
        "successes": 0,
        "success": "reward = 1",
        "reward_1_rate": 0.0,
        "reward_half_rate": 0.0,
        "mean_reward": 0.0,
        "mean_steps": 3.0,
    }
    scripts = {g["instruction_text"]: ["think: nothing fits", "search[nothing]"] * 30 for g in prepared.graded}
    result, _ = _evaluate(prepared, scripts)  # never buying: reward 0 after the 50 steps
    assert (result["score"], result["mean_reward"], result["mean_steps"]) == (0.0, 0.0, 50.0)


def test_workspace_env_rolls_out_training_goals_without_a2rl(prepared):
    """The copied env.py and react.py run on the standard library alone (python -S: no site-packages)."""
    code = """
import json, sys
sys.path.insert(0, ".")
import env
shop, goals = env.load_catalogue(), env.load_goals()
goal = goals[0]
script = ["search[" + goal["query"] + "]", "click[" + goal["asin"] + "]"]
script += ["click[" + o + "]" for o in goal["goal_options"]] + ["click[buy now]"]
episode = env.rollout(lambda prompt: " " + script.pop(0) + "\\n", shop, goal)
print(json.dumps({"won": episode.won, "reward": episode.reward, "actions": len(episode.actions),
                  "loop": env._rollout.__module__, "a2rl": "a2rl" in sys.modules}))
"""
    run = subprocess.run(
        [sys.executable, "-S", "-E", "-c", code],
        cwd=prepared.train,
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert run.returncode == 0, run.stderr
    goal = prepared.goals[0]
    assert json.loads(run.stdout) == {
        "won": True,
        "reward": 1.0,
        "actions": len(goal["goal_options"]) + 3,
        "loop": "react",
        "a2rl": False,
    }
