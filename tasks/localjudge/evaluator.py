"""Score localjudge: win rate of the policy's answers against the reference answers, judged by a local model.

The judge (options["judge_model"]: a model directory or builtin:NAME) is served in process by the grader's engine,
on its backend (vLLM where the grader uses it), after the policy has answered. Policy and judge decode greedily,
so the score of a given model is reproducible on one backend.
"""

from __future__ import annotations

import json
from pathlib import Path

from a2rl.llm.judge import judge_client
from a2rl.tasklib.pairwise import compare_to_references, win_rate_summary


def evaluate(generator, heldout_dir: Path, options: dict, *, engine) -> dict:
    rows = [json.loads(line) for line in (Path(heldout_dir) / "test.jsonl").read_text().splitlines() if line]
    references = [r["reference"] for r in rows]
    judge = judge_client({"model_path": str(options["judge_model"])}, engine)
    comparison = compare_to_references(
        generator,
        [r["instruction"] for r in rows],
        references,
        judge,
        max_new_tokens=int(options.get("max_new_tokens", 64)),
        batch_size=int(options.get("batch_size", 64)),
    )
    summary = win_rate_summary(comparison, references)
    return {"score": summary["win_rate"], **summary, "judge": judge.describe()}
