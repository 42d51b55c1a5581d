"""alpacaeval's `paper` protocol end to end: alpaca_eval's annotator prompt sent to a judge (a real HTTP server on
loopback in place of the remote LLM), its logprob-weighted preference, the written-identifier fallback, and the
LC fit over the prepared df_gamed.csv (a made-up one, tests/fixtures/alpacaeval/df_gamed.csv)."""

from __future__ import annotations

import math
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from a2rl.grading.evaluate import evaluate_model
from a2rl.spec.tasks import get_task
from a2rl.tasklib.evaluator import load_evaluator
from a2rl.tasklib.prepare import ensure_prepared
from a2rl.tasklib.taskdata import read_jsonl
from fakes import FakeGenerator
from test_judge import completion, stub_llm

FIXTURES = Path(__file__).parent / "fixtures" / "alpacaeval"
TASK = get_task("alpacaeval")
EVAL = load_evaluator(TASK)
OUTPUT = re.compile(r'"model_identifier": "(m|M)",\n\s*"output": """(.*?)"""\n', re.S)
INSTRUCTION = re.compile(r'"instruction": """(.*?)""",\n}', re.S)


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("data")
    ensure_prepared(TASK, root, source=FIXTURES)
    return root


def _shown(body: dict) -> tuple[str, dict[str, str]]:
    """(instruction, {identifier: output}) of a paper-protocol judge request."""
    user = body["messages"][-1]["content"]
    return INSTRUCTION.search(user).group(1), dict(OUTPUT.findall(user))


def test_paper_grading_against_a_stub_judge(tiny_model: Path, data_root: Path) -> None:
    """The stub's P(policy better) is 0.8 on every third prompt, else 0.3, given as m/M logprobs wherever the
    policy's answer sits; the score must follow them through alpaca_eval's order switch into the LC fit."""
    heldout = TASK.data(data_root).heldout_dir
    rows = read_jsonl(heldout / "test.jsonl")
    baseline = {r["instruction"]: r["output"] for r in rows}
    wins = {r["instruction"]: 0.8 if i % 3 == 0 else 0.3 for i, r in enumerate(rows)}
    answers: dict[str, str] = {}

    def reply(body: dict, headers: dict) -> tuple[int, dict]:
        instruction, shown = _shown(body)
        policy = "M" if shown["m"] == baseline[instruction] else "m"
        answers[instruction] = shown[policy]
        p_m = wins[instruction] if policy == "m" else 1 - wins[instruction]
        return 200, completion(
            "m" if p_m > 0.5 else "M", top=[("m", math.log(p_m)), ("M", math.log(1 - p_m)), ("The", -9.0)]
        )

    with stub_llm(reply) as (url, seen):
        options = {"max_new_tokens": 8, "judge": {"base_url": url, "model": "stub-judge", "retries": 0}}
        score, details = evaluate_model(TASK, tiny_model, tiny_model, data_root=data_root, options=options)
    assert len(seen) == len(rows)  # one verdict per prompt (the tiny model never repeats GPT-4 Turbo's answer)
    assert all(s["body"]["max_tokens"] == 1 and s["body"]["top_logprobs"] == 5 for s in seen)
    switched = [EVAL.is_switched(r["instruction"]) for r in rows]
    assert 0 < sum(switched) < len(rows)  # both orders occur, so a lost mirror would show
    for s in seen:
        instruction, _ = _shown(s["body"])
        first, second = baseline[instruction], answers[instruction]
        if EVAL.is_switched(instruction):
            first, second = second, first
        assert s["body"]["messages"] == EVAL.paper_messages(instruction, first, second)
    expected = [1 + wins[r["instruction"]] for r in rows]
    assert details["win_rate"] == pytest.approx(100 * sum(p - 1 for p in expected) / len(rows))
    lc, weights = EVAL.paper_length_controlled_winrate(
        expected,
        [len(answers[r["instruction"]]) for r in rows],
        [len(r["output"]) for r in rows],
        pd.read_csv(heldout / "df_gamed.csv"),
    )
    assert score == details["length_controlled_winrate"] == pytest.approx(lc)
    assert details["lc_weights"] == pytest.approx(weights) and set(weights) == {
        "length",
        "instruction_difficulty",
        "not_gamed_baseline",
    }
    assert details["lc_method"].startswith("alpaca_eval glm length_controlled_v1")


def test_paper_falls_back_to_the_written_identifier_without_logprobs(data_root: Path) -> None:
    """A judge that returns no logprobs: "M" (policy second) or "m" → preference 2 or 1, mirrored after a switch;
    anything else → no preference."""
    rows = read_jsonl(TASK.data(data_root).heldout_dir / "test.jsonl")
    instructions, baseline = [r["instruction"] for r in rows], [r["output"] for r in rows]
    answers = [f"answer {i}" for i in range(len(rows))]
    answers[2] = baseline[2]  # identical: a draw without asking

    def reply(body: dict, headers: dict) -> tuple[int, dict]:
        instruction, shown = _shown(body)
        i = instructions.index(instruction)
        policy = "M" if shown["m"] == baseline[i] else "m"
        text = {0: policy, 1: "m" if policy == "M" else "M"}.get(i % 3, "Both")
        return 200, completion(text)

    with stub_llm(reply) as (url, seen):
        client = EVAL.ChatClient(url, "stub-judge", retries=0)
        preferences = EVAL.paper_preferences(instructions, baseline, answers, client)
    assert len(seen) == len(rows) - 1
    expected = [1.5 if i == 2 else {0: 2.0, 1: 1.0}.get(i % 3) for i in range(len(rows))]
    assert preferences == expected
    summary = EVAL.paper_summary(preferences, answers, baseline)
    assert summary["unparsed_verdicts"] == expected.count(None) and summary["n_draws"] == 1


def test_paper_without_df_gamed_fails_clearly_before_generating(data_root: Path, tmp_path: Path) -> None:
    heldout = tmp_path / "heldout"
    shutil.copytree(TASK.data(data_root).heldout_dir, heldout)
    (heldout / "df_gamed.csv").unlink()
    generator = FakeGenerator("an answer")
    options = {**TASK.spec.eval, "protocol": "paper", "judge": {"base_url": "http://127.0.0.1:9/v1", "model": "x"}}
    with pytest.raises(EVAL.MissingGamedAnnotations, match=r"df_gamed.csv is missing.*prepare alpacaeval"):
        EVAL.evaluate(generator, heldout, options)
    assert generator.calls == 0
