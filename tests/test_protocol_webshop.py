"""WebShop's protocol `paper`: the reference's synthetic goals 0–99 in SimServer's order, its chat prompt with a
5-step history window, its action clean-up, success = reward >= 0.5; every success definition reported."""

from __future__ import annotations

import itertools
import json
import random
import re

import pytest

from fakes import FakeGenerator
from test_task_webshop import EVAL, FIXTURES, N_HELDOUT, PREP, TASK, _prepare, ws


def _tokenizer(text: str, add_special_tokens: bool = True) -> dict:
    return {"input_ids": text.split()}


_tokenizer.chat_template = None  # chat_prompt's plain transcript: "System: ...\nUser: ...\nAssistant:"


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    p = _prepare(tmp_path_factory.mktemp("webshop"))
    p.synthetic = ws.load_goals(p.heldout, "synthetic_goals.jsonl")
    return p


def test_synthetic_goals_are_get_synthetic_goals_in_simservers_order(prepared):
    ins = json.loads((FIXTURES / "items_ins_v2_1000.json").read_text())
    expected = []
    for asin, product in prepared.catalogue.products.items():
        if asin not in ins:
            continue
        names = sorted(product["options"])
        for combo in itertools.product(*(product["options"][n] for n in names)):
            text = ins[asin]["instruction"] + (
                " with " + ", and ".join(f"{n}: {v}" for n, v in zip(names, combo)) if names else ""
            )
            expected.append((asin, text, dict(zip(names, combo)), ins[asin]["instruction_attributes"]))
    state = random.getstate()
    random.seed(233)
    random.shuffle(expected)
    random.setstate(state)
    got = [
        (g["asin"], g["instruction_text"].split(", and price lower than")[0], g["goal_options"], g["attributes"])
        for g in prepared.synthetic
    ]
    assert got == expected[:N_HELDOUT] and len(expected) > 20
    caps = {}
    for goal in prepared.synthetic:  # one price cap per product, above its price
        price = prepared.catalogue.products[goal["asin"]]["price"]
        assert goal["price_upper"] in PREP.PRICE_RANGE and price < goal["price_upper"] <= price + 40
        assert caps.setdefault(goal["asin"], goal["price_upper"]) == goal["price_upper"]


def test_a_synthetic_goals_options_match_as_upstreams_name_value_pairs():
    """get_reward passes goal_options.items(): a pair is normalized only to a color equal to one of its halves,
    and is otherwise scored as the text "('color', 'black | white')"."""
    assert ws.goal_option_texts({"color": "navy", "size": "8"}) == ["navy", "('size', '8')"]
    assert ws.option_matches(["white"], {"color": "black | white"}) == 1  # "white" is within the pair's words
    assert ws.option_matches(["white"], ["black | white"]) == 0  # a human goal's value normalizes to "black"


def _chat_script(prepared, scripts: dict[str, list[str]]) -> FakeGenerator:
    def step(prompt: str) -> str:
        instruction = re.search(r"\nInstruction: (.*?)\n\nAvailable actions:", prompt).group(1)
        step_no = int(re.findall(r"Action (\d+):", prompt)[-1])
        return scripts[instruction][step_no - 1] + "\nmore text"

    return FakeGenerator(script=step, tokenizer=_tokenizer)


def _options(prepared, goal: dict, right: bool) -> list[str]:
    product = prepared.catalogue.products[goal["asin"]]
    return [
        goal["goal_options"][n] if right else next(v for v in product["options"][n] if v != goal["goal_options"][n])
        for n in sorted(goal["goal_options"])
    ]


def _evaluate(prepared, gen, protocol="paper") -> dict:
    return EVAL.evaluate(gen, prepared.heldout, {**TASK.spec.eval, "protocol": protocol})


def test_paper_grades_synthetic_goals_with_the_references_prompt(prepared):
    scripts = {
        g["instruction_text"]: [
            f"search[{g['query']}]",
            f"Action: click[{g['asin'].lower()}]",
            *(f"choose[{o}]" for o in _options(prepared, g, True)),
            "click[buy now]",
        ]
        for g in prepared.synthetic
    }
    gen = _chat_script(prepared, scripts)
    result = _evaluate(prepared, gen)
    assert (result["score"], result["reward_1_rate"], result["mean_reward"]) == (100.0, 100.0, 1.0)
    assert result["success"] == "reward >= 0.5" and result["n"] == N_HELDOUT
    first = gen.prompts[0]
    assert first.startswith(f"System: {ws.PAPER_SYSTEM}\nUser: You are shopping on an e-commerce website.")
    assert "\n\nAvailable actions:\n  search[<your query>]\n  click[search]\n\nRules:\n" in first
    assert first.endswith(
        "\nObservation 1: WebShop [SEP] Instruction: [SEP] "
        f"{prepared.synthetic[0]['instruction_text']} [SEP] Search\nAction 1:\nAssistant:"
    )
    assert set(gen.stops) == {"\n"}


def test_paper_counts_half_rewards_as_successes_and_a2rl_does_not(prepared):
    with_options = [g for g in prepared.synthetic if g["goal_options"]]
    assert with_options
    scripts = {
        g["instruction_text"]: [
            f"search[{g['query']}]",
            f"click[{g['asin']}]",
            *(f"click[{o}]" for o in _options(prepared, g, False)),
            "click[buy now]",
        ]
        for g in prepared.synthetic
    }
    result = _evaluate(prepared, _chat_script(prepared, scripts))
    rewards = []
    for g in prepared.synthetic:
        product = prepared.catalogue.products[g["asin"]]
        wrong = dict(zip(sorted(g["goal_options"]), _options(prepared, g, False)))
        rewards.append(ws.get_reward(product, g, product["price"], wrong)[0])
    assert all(0.5 <= r < 1 for r, g in zip(rewards, prepared.synthetic) if g["goal_options"])
    assert result["successes"] == N_HELDOUT and result["score"] == 100.0  # reward >= 0.5
    assert result["reward_1_rate"] == 100.0 * sum(r == 1 for r in rewards) / N_HELDOUT < 100.0
    assert result["mean_reward"] == pytest.approx(sum(rewards) / N_HELDOUT)


def test_paper_prompt_keeps_the_last_5_steps_numbered_from_the_start(prepared):
    gen = FakeGenerator(reply=" search[deodorant]\nObservation: made up", tokenizer=_tokenizer)
    result = _evaluate(prepared, gen)
    assert (result["score"], result["mean_reward"], result["mean_steps"]) == (0.0, 0.0, 50.0)
    eighth = gen.prompts[7 * N_HELDOUT]  # the 8th step of the first goal (all goals step together)
    assert "\nObservation 3: " in eighth and "\nAction 7: search[deodorant]\n" in eighth
    assert "\nObservation 2: " not in eighth and eighth.endswith("\nAction 8:\nAssistant:")


def test_paper_ends_an_episode_whose_prompt_does_not_fit_as_a_failure(prepared):
    gen = FakeGenerator(reply="search[deodorant]", tokenizer=_tokenizer, context=10)
    assert _evaluate(prepared, gen)["mean_steps"] == 0.0 and gen.calls == 0


def test_an_unknown_protocol_is_a_one_line_error(prepared):
    with pytest.raises(ValueError, match="webshop: unknown protocol 'table2'"):
        _evaluate(prepared, FakeGenerator(reply="x"), "table2")
