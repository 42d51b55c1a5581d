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

train/: products.jsonl (the shop), goals.jsonl (every human goal but the graded ones and their duplicates), env.py
and react.py (the environment and the grader's ReAct loop) and trajectories.jsonl (a scripted expert's episode on
every training goal: WebShop's human demonstrations are not among the files this step can fetch). heldout/:
products.jsonl, goals.jsonl (human goals 0–99, protocol `a2rl`) and synthetic_goals.jsonl (synthetic goals 0–99,
protocol `paper`).
"""

from __future__ import annotations

import itertools
import json
import random
import re
import shutil
import tempfile
import urllib.request
from pathlib import Path

import a2rl.tasklib.envs
from a2rl.tasklib.taskdata import write_jsonl

FILES = {  # setup.sh's Google Drive ids
    "items_shuffle_1000.json": "1EgHdxQ_YxqIQlvvq5iKlCrkEKR6-j0Ib",
    "items_ins_v2_1000.json": "1IduG0xl544V_A_jv3tHXC0kyFi7PnyBu",
    "items_human_ins.json": "14Kb5SPBk_jfdLZ_CDBNitW98QLDlKR5O",
}
URL = "https://drive.usercontent.google.com/download?id={}&export=download&confirm=t"
NUM_PRODUCTS = 1000  # the reference's num_products
N_HELDOUT = 100  # graded goals: 0..N_HELDOUT-1
SEED = 233  # prices and price caps; the goal order uses SimServer's own seed, also 233
PRICE_RANGE = [10.0 * i for i in range(1, 100)]  # goal.py
EXPERT_PAGES = 5  # result pages the expert turns before giving up on finding the goal's product

ws = a2rl.tasklib.envs.load_module(Path(__file__).with_name("env.py"), "a2rl_task_webshop_env")


def download(file_id: str, path: Path) -> None:
    urllib.request.urlretrieve(URL.format(file_id), path)


def read(name: str, source: Path | None, tmp: Path):
    """An upstream JSON file: under `source`, or downloaded into `tmp`."""
    path = Path(source) / name if source is not None else tmp / name
    if source is None:
        download(FILES[name], path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise RuntimeError(f"{name} is not JSON (Google Drive may have refused the download): fetch it as "
                           f"WebShop's setup.sh does and run `a2rl prepare webshop --source <its folder>`") from e


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
        options = {name.lower(): [o["value"].strip().replace("/", " | ").lower() for o in values]
                   for name, values in (p["customization_options"] or {}).items() if values is not None}
        small = p["small_description"]
        products.append({
            "asin": asin, "name": p["name"], "Title": p["name"], "Description": p["full_description"],
            "BulletPoints": small if isinstance(small, list) else [small],
            "Price": f"${pricing[0]}" if len(pricing) == 1 else f"${pricing[0]} to ${pricing[1]}",
            "pricing": pricing, "options": options,
            "Attributes": attributes.get(asin, {}).get("attributes") or ["DUMMY_ATTR"],
            "category": p["category"], "query": p["query"].lower().strip(), "product_category": p["product_category"],
        })
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
            goals.append({"asin": product["asin"], "category": product["category"], "query": product["query"],
                          "name": product["name"], "product_category": product["product_category"],
                          "instruction_text": ins["instruction"].strip(".") + price_text,
                          "attributes": ins["instruction_attributes"], "price_upper": price_upper,
                          "goal_options": ins["instruction_options"]})
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
            goals.append({"asin": product["asin"], "category": product["category"], "query": product["query"],
                          "name": product["Title"], "product_category": product["product_category"],
                          "instruction_text": entry["instruction"] + (f" with {option_text}" if option_text else "")
                          + price_text, "attributes": entry["instruction_attributes"],
                          "price_upper": price_upper, "goal_options": options})
    random.Random(233).shuffle(goals)
    return goals


def split(goals: list[dict]) -> tuple[list[dict], list[dict]]:
    """(train, graded): goals 0..N_HELDOUT-1 are graded; train drops any other goal asking the same of the same
    product (the human data repeats a few instructions)."""
    if len(goals) <= N_HELDOUT:
        raise ValueError(f"the source yields {len(goals)} goals; grading {N_HELDOUT} leaves none to train on")

    def key(goal: dict) -> tuple[str, str]:
        return goal["asin"], goal["instruction_text"].split(", and price lower than ")[0]

    graded = goals[:N_HELDOUT]
    taken = {key(g) for g in graded}
    return [g for g in goals[N_HELDOUT:] if key(g) not in taken], graded


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


def expert_trajectories(train_dir: Path) -> list[dict]:
    goals = ws.load_goals(train_dir)
    return [a2rl.tasklib.envs.trajectory_record(e, expert_episode(ws.make_env(train_dir, e), goals[int(e)]),
                                                ws.HEADER, "scripted_expert")
            for e in ws.train_episodes(train_dir)]


def prepare(train_dir: Path, heldout_dir: Path, source: Path | None = None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        raw, attributes, human = (read(name, source, Path(tmp)) for name in FILES)
    rng = random.Random(SEED)
    products = load_products(raw, attributes, rng)
    after_prices = rng.getstate()  # each goal set draws its price caps after the prices, as in its own SimServer
    train, graded = split(human_goals(products, human, rng))
    rng.setstate(after_prices)
    for directory, goals in ((Path(train_dir), train), (Path(heldout_dir), graded)):
        write_jsonl(directory / "products.jsonl", products)
        write_jsonl(directory / "goals.jsonl", goals)
    write_jsonl(Path(heldout_dir) / "synthetic_goals.jsonl", synthetic_goals(products, attributes, rng)[:N_HELDOUT])
    shutil.copyfile(Path(__file__).with_name("env.py"), Path(train_dir) / "env.py")
    shutil.copyfile(a2rl.tasklib.envs.__file__, Path(train_dir) / "react.py")
    write_jsonl(Path(train_dir) / "trajectories.jsonl", expert_trajectories(Path(train_dir)))
