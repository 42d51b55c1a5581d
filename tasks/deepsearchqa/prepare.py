"""Prepare deepsearchqa: the reference's split of google/deepsearchqa's 900 questions.

Upstream file: `DSQA-full.csv` at the root of the Hugging Face dataset repo google/deepsearchqa (its only split,
"eval"), a CSV with a header and columns problem, problem_category, answer, answer_type. The reference loads it
with `datasets`, shuffles with seed 42 and gives the agent the first 100 questions; we grade on the next 200.
"""

from __future__ import annotations

import csv
import tempfile
from pathlib import Path

import numpy as np

from a2rl.tasklib.taskdata import write_jsonl

REPO, FILE = "google/deepsearchqa", "DSQA-full.csv"
FIELDS = ("problem", "problem_category", "answer", "answer_type")
SEED, N_TRAIN, N_HELDOUT = 42, 100, 200


def split(rows: list[dict[str, str]]) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """(visible, graded): exactly `datasets.Dataset.shuffle(seed=42)`, which permutes with numpy's default_rng."""
    order = np.random.default_rng(SEED).permutation(len(rows))
    shuffled = [rows[i] for i in order]
    return shuffled[:N_TRAIN], shuffled[N_TRAIN : N_TRAIN + N_HELDOUT]


def prepare(train_dir: Path, heldout_dir: Path, source: Path | None = None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        if source is None:
            from huggingface_hub import hf_hub_download

            hf_hub_download(REPO, FILE, repo_type="dataset", local_dir=tmp)
        with open(Path(source or tmp) / FILE, newline="", encoding="utf-8") as f:
            rows = [{k: r[k] for k in FIELDS} for r in csv.DictReader(f)]
    if len(rows) < N_TRAIN + N_HELDOUT:
        raise ValueError(f"{FILE} has {len(rows)} questions; the split needs {N_TRAIN + N_HELDOUT}")
    train, heldout = split(rows)
    write_jsonl(Path(train_dir) / "train.jsonl", train)
    write_jsonl(Path(heldout_dir) / "test.jsonl", heldout)
