"""alpacaeval: prepare from the upstream files, the length-controlled win rate, and grading against a stub judge
(a real HTTP server in place of the remote LLM)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from a2rl.grading.evaluate import evaluate_model
from a2rl.spec.tasks import get_task
from a2rl.tasklib.evaluator import load_evaluator
from a2rl.tasklib.prepare import ensure_prepared
from a2rl.tasklib.taskdata import read_jsonl
from test_judge import completion, stub_llm

FIXTURES = Path(__file__).parent / "fixtures" / "alpacaeval"
TASK = get_task("alpacaeval")
EVAL = load_evaluator(TASK)
lc_winrate = EVAL.length_controlled_winrate


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("data")
    ensure_prepared(TASK, root, source=FIXTURES)
    return root


def test_prepare_keeps_the_first_2000_alpaca_rows_and_every_baseline_answer(data_root: Path) -> None:
    data = TASK.data(data_root)
    upstream = pq.read_table(FIXTURES / "data/train-00000-of-00001-a09b74b3ef9c3b56.parquet").to_pylist()
    assert len(upstream) > 2000 and read_jsonl(data.train_dir / "train.jsonl") == upstream[:2000]
    baseline = json.loads((FIXTURES / "alpaca_eval_gpt4_baseline.json").read_text())
    assert read_jsonl(data.heldout_dir / "test.jsonl") == baseline
    assert (data.heldout_dir / "df_gamed.csv").read_bytes() == (FIXTURES / "df_gamed.csv").read_bytes()
    assert sorted(p.name for p in data.train_dir.iterdir()) == ["train.jsonl"]  # no baseline answers for the agent


def test_lc_winrate_equals_the_raw_one_without_length_differences() -> None:
    prefs = [1.0] * 210 + [0.0] * 90  # raw 70 %
    lc, weights = lc_winrate(prefs, [100] * 300, [100] * 300)
    # Only the intercept is fitted: it solves 300 σ(θ) − 210 + λθ = 0 (λ the ridge). Bisect it independently.
    lo, hi = -5.0, 5.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if 300 / (1 + math.exp(-mid)) - 210 + EVAL.RIDGE * mid < 0 else (lo, mid)
    assert lc == pytest.approx(100 / (1 + math.exp(-lo)), abs=1e-6) and lc == pytest.approx(70, abs=0.01)
    assert weights["length"] == 0


def test_lc_winrate_removes_a_preference_explained_by_length() -> None:
    # The judge prefers whichever answer is longer (p = 0.9 vs 0.1); the policy is longer on 3 of 4 prompts, so
    # its raw win rate is 70 %. At equal length neither side is favoured: LC ≈ 50 %.
    n_long, n_short = 60, 20
    prefs = [0.9] * n_long + [0.1] * n_short
    lengths = [300] * n_long + [100] * n_short
    lc, weights = lc_winrate(prefs, lengths, [200] * (n_long + n_short))
    assert sum(prefs) / len(prefs) == pytest.approx(0.7)
    assert lc == pytest.approx(50, abs=0.2) and weights["length"] > 2
    # A policy that wins regardless of length keeps its win rate.
    lc_fair, _ = lc_winrate([0.9] * 40 + [0.5] * 40, [300, 100] * 40, [200] * 80)
    assert lc_fair == pytest.approx(70, abs=0.2)


def test_lc_winrate_stays_finite_when_one_side_wins_every_comparison() -> None:
    lc, _ = lc_winrate([0.0] * 805, list(range(805)), [1000] * 805)
    assert 0 <= lc < 1
    lc, _ = lc_winrate([1.0] * 600 + [0.0] * 205, [300] * 600 + [100] * 205, [200] * 805)  # separable by length
    assert 0 < lc < 100


def test_grading_against_a_stub_judge(tiny_model: Path, data_root: Path) -> None:
    """The stub prefers the policy on some prompts (by logprobs), and on one it always says "A" whatever the
    order; the score must follow those verdicts through the position swap and the LC fit."""
    rows = read_jsonl(TASK.data(data_root).heldout_dir / "test.jsonl")
    baseline = {r["instruction"]: r["output"] for r in rows}
    wins = {r["instruction"]: 0.8 if i % 3 == 0 else 0.3 for i, r in enumerate(rows)}  # P(policy better)
    biased = rows[1]["instruction"]
    seen_answers: dict[str, str] = {}

    def reply(body: dict, headers: dict) -> tuple[int, dict]:
        prompt = body["messages"][-1]["content"]
        instruction, a, b = re.fullmatch(
            r"# Instruction\n(.*)\n\n# Response A\n(.*)\n\n# Response B\n(.*)\n\n"
            r"Which response is better\? Answer A or B\.",
            prompt,
            re.S,
        ).groups()
        policy_is_a = b == baseline[instruction]
        seen_answers[instruction] = a if policy_is_a else b
        p_a = 0.95 if instruction == biased else (wins[instruction] if policy_is_a else 1 - wins[instruction])
        top = [("A", math.log(p_a)), ("B", math.log(1 - p_a)), ("The", math.log(0.001))]
        return 200, completion("A" if p_a > 0.5 else "B", top=top)

    with stub_llm(reply) as (url, seen):
        options = {"max_new_tokens": 24, "judge": {"base_url": url, "model": "stub-judge", "retries": 0}}
        score, details = evaluate_model(
            TASK, tiny_model, tiny_model, data_root=data_root, protocol="a2rl", options=options
        )
    assert len(seen) == 2 * len(rows)
    assert all(s["body"]["max_tokens"] == 1 and s["body"]["top_logprobs"] == 20 for s in seen)
    expected = [0.5 if r["instruction"] == biased else wins[r["instruction"]] for r in rows]
    assert details["win_rate"] == pytest.approx(100 * sum(expected) / len(rows))
    lc, weights = lc_winrate(
        expected, [len(seen_answers[r["instruction"]]) for r in rows], [len(r["output"]) for r in rows]
    )
    assert score == details["length_controlled_winrate"] == pytest.approx(lc)
    assert details["lc_weights"] == pytest.approx(weights) and details["n_total"] == len(rows)
    assert details["judge"]["model"] == "stub-judge" and details["judge"]["version"] == "stub-judge-2024-01-01"
    assert details["baseline_generator"] == ["gpt4_1106_preview"] and "instruction" in details["lc_method"]
