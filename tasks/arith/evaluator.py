"""Score the arith task: exact match of the completion's first line against the answer.

Prompts end with "Answer:" (see prepare.py); a correct completion is " <integer>" then a newline.
"""

from __future__ import annotations

import json
from pathlib import Path


def extract_answer(text: str) -> str:
    """The first line of a completion, without surrounding whitespace."""
    return text.split("\n", 1)[0].strip()


def evaluate(generator, heldout_dir: Path, options: dict) -> dict:
    rows = [json.loads(line) for line in (Path(heldout_dir) / "test.jsonl").read_text().splitlines() if line]
    if options.get("limit") is not None:  # the first N problems (tools/bench/grading.py)
        rows = rows[: int(options["limit"])]
    completions = generator.generate(
        [r["prompt"] for r in rows],
        max_new_tokens=int(options.get("max_new_tokens", 8)),
        batch_size=int(options.get("batch_size", 100)),
        stop="\n",
    )
    correct = sum(extract_answer(c) == r["answer"] for c, r in zip(completions, rows))
    return {"score": 100.0 * correct / len(rows), "n": len(rows), "correct": correct}
