"""Prepare alpacaeval: train = the first 2,000 rows of tatsu-lab/alpaca; graded = the 805 AlpacaEval prompts with
the AlpacaEval 2.0 baseline answers (GPT-4 Turbo, `gpt4_1106_preview`).

Upstream files, at their paths in the two Hugging Face dataset repositories (a `source` directory holds both):
- tatsu-lab/alpaca `data/train-00000-of-00001-a09b74b3ef9c3b56.parquet`: columns instruction, input, output, text.
- tatsu-lab/alpaca_eval `alpaca_eval_gpt4_baseline.json`: a JSON list of {instruction, output, generator,
  dataset}. (`alpaca_eval.json` beside it has the same layout but AlpacaEval 1.0's text-davinci-003 answers.)
- tatsu-lab/alpaca_eval `df_gamed.csv`: the annotations of two length-gamed copies of the baseline, with each
  instruction's difficulty, that the `paper` protocol's LC fit reads (as alpaca_eval downloads it); copied into
  the held-out folder unchanged. (`instruction_difficulty.csv` beside it is read upstream only to move an LC onto
  another baseline, which we do not do.)
"""

from __future__ import annotations

import csv
import json
import shutil
import tempfile
from pathlib import Path

from a2rl.tasklib.taskdata import write_jsonl

ALPACA = ("tatsu-lab/alpaca", "data/train-00000-of-00001-a09b74b3ef9c3b56.parquet")
BASELINE = ("tatsu-lab/alpaca_eval", "alpaca_eval_gpt4_baseline.json")
GAMED = ("tatsu-lab/alpaca_eval", "df_gamed.csv")
GAMED_COLUMNS = ("model", "index", "preference", "std_delta_len", "instruction_difficulty", "not_gamed_baseline")
N_TRAIN = 2000
TRAIN_COLUMNS = ["instruction", "input", "output", "text"]
HELDOUT_KEYS = ("instruction", "output", "generator", "dataset")


def prepare(train_dir: Path, heldout_dir: Path, source: Path | None = None) -> None:
    import pyarrow.parquet as pq

    with tempfile.TemporaryDirectory() as tmp:
        if source is None:
            from huggingface_hub import hf_hub_download

            for repo, path in (ALPACA, BASELINE, GAMED):
                hf_hub_download(repo, path, repo_type="dataset", local_dir=tmp)
        src = Path(source or tmp)
        train = pq.read_table(src / ALPACA[1], columns=TRAIN_COLUMNS).slice(0, N_TRAIN).to_pylist()
        baseline = json.loads((src / BASELINE[1]).read_text(encoding="utf-8"))
        with open(src / GAMED[1], newline="", encoding="utf-8") as f:
            header = next(csv.reader(f), [])
        if missing := set(GAMED_COLUMNS) - set(header):
            raise ValueError(f"{GAMED[1]}: missing columns {sorted(missing)}")
        shutil.copyfile(src / GAMED[1], Path(heldout_dir) / GAMED[1])
    if len(train) < N_TRAIN:
        raise ValueError(f"{ALPACA[1]} has {len(train)} rows; expected at least {N_TRAIN}")
    if not baseline or any(set(HELDOUT_KEYS) - set(r) for r in baseline):
        raise ValueError(f"{BASELINE[1]}: expected a non-empty list of objects with keys {HELDOUT_KEYS}")
    write_jsonl(Path(train_dir) / "train.jsonl", train)
    write_jsonl(Path(heldout_dir) / "test.jsonl", [{k: r[k] for k in HELDOUT_KEYS} for r in baseline])
