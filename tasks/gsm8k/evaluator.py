"""Score GSM8K: 4-shot chain of thought, greedy, exact match on the final number.

The prompt is four train exemplars as "Question: ...\nAnswer: <reasoning>\n#### <number>", each followed by a
blank line, then "Question: <question>\nAnswer:". Generation stops at the first blank line; the answer is the
number after "####" (see extract_number for the fallbacks).
"""

from __future__ import annotations

import json
from pathlib import Path

from a2rl.tasklib.answers import GSM8K_STOP as STOP, extract_number, format_answer  # shared with the pipeline's reward


def build_prompt(exemplars: list[dict[str, str]], question: str) -> str:
    shots = "".join(f"Question: {e['question']}\nAnswer: {format_answer(e['answer'])}{STOP}" for e in exemplars)
    return f"{shots}Question: {question}\nAnswer:"


def _read_jsonl(path: Path) -> list[dict[str, str]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def evaluate(generator, heldout_dir: Path, options: dict) -> dict:
    exemplars = _read_jsonl(Path(heldout_dir) / "fewshot.jsonl")
    rows = _read_jsonl(Path(heldout_dir) / "test.jsonl")
    if options.get("limit") is not None:
        rows = rows[: int(options["limit"])]
    completions = generator.generate(
        [build_prompt(exemplars, r["question"]) for r in rows],
        max_new_tokens=int(options.get("max_new_tokens", 256)),
        batch_size=int(options.get("batch_size", 32)),
        stop=STOP,
    )
    predicted = [extract_number(c) for c in completions]
    correct = sum(p is not None and p == extract_number(r["answer"]) for p, r in zip(predicted, rows))
    return {
        "score": 100.0 * correct / len(rows),
        "n": len(rows),
        "correct": correct,
        "no_number": sum(p is None for p in predicted),
    }
