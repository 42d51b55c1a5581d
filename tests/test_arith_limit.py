"""arith's `limit` option (as gsm8k's and humaneval's): only the first N held-out problems are graded."""

from __future__ import annotations

import json

from a2rl.spec.tasks import get_task
from a2rl.tasklib.evaluator import load_evaluator
from a2rl.tasklib.prepare import ensure_prepared
from fakes import FakeGenerator


def test_limit_grades_the_first_problems(tmp_path):
    ensure_prepared(get_task("arith"), tmp_path)
    heldout = get_task("arith").data(tmp_path).heldout_dir
    rows = [json.loads(line) for line in (heldout / "test.jsonl").read_text().splitlines() if line]
    gen = FakeGenerator(script=lambda p: " " + next(r["answer"] for r in rows if r["prompt"] == p))
    result = load_evaluator(get_task("arith")).evaluate(gen, heldout, {"limit": 3})
    assert (result["n"], result["correct"], result["score"]) == (3, 3, 100.0)
    assert gen.prompts == [r["prompt"] for r in rows[:3]]
