"""Score HumanEval: pass@1 with greedy decoding, each program run in a2rl.sandbox.

The model continues the problem's prompt (a signature and docstring); the completion is cut at the first of
the Codex paper's stop sequences, then prompt + completion + the problem's tests + `check(entry_point)` runs.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from a2rl.grading.sandbox import run_many
from a2rl.tasklib.answers import HUMANEVAL_STOP as STOP_SEQUENCES, cut_at_stop, humaneval_program as build_program


def truncate(completion: str) -> str:
    """`completion` up to the earliest stop sequence."""
    return cut_at_stop(completion, STOP_SEQUENCES)


def evaluate(generator, heldout_dir: Path, options: dict) -> dict:
    problems = [json.loads(line) for line in (Path(heldout_dir) / "test.jsonl").read_text().splitlines() if line]
    if options.get("limit") is not None:
        problems = problems[: int(options["limit"])]
    # Decoding stops at the stop sequences, so a finished function costs no more tokens; the completion comes back
    # cut where truncate() cuts it.
    completions = generator.generate(
        [p["prompt"] for p in problems],
        max_new_tokens=int(options.get("max_new_tokens", 512)),
        batch_size=int(options.get("batch_size", 16)),
        stop=STOP_SEQUENCES,
    )
    results = run_many(
        [build_program(p, c) for p, c in zip(problems, completions)],
        timeout_s=float(options.get("timeout_s", 10.0)),
        memory_mb=int(options.get("memory_mb", 1024)),
        workers=int(options.get("workers", 2)),
    )
    passed = sum(r.passed for r in results)
    return {
        "score": 100.0 * passed / len(problems),
        "n": len(problems),
        "passed": passed,
        "statuses": dict(Counter(r.status for r in results)),
    }
