"""Prepare GSM8K: the agent trains on openai/gsm8k `train` (7,473); the grader scores `test` (1,319).

Upstream layout (HF dataset repo openai/gsm8k, config `main`): one parquet file per split with string columns
question and answer, the answer ending in "#### <number>". Both splits are written as JSON lines with those two
fields, unchanged and in upstream order; the held-out side also gets the few-shot exemplars, taken from train.
"""

from __future__ import annotations

from pathlib import Path

from a2rl.tasklib.prompts import GSM8K_SHOTS
from a2rl.tasklib.taskdata import write_jsonl

REPO = "openai/gsm8k"
FILES = {"train": "main/train-00000-of-00001.parquet", "test": "main/test-00000-of-00001.parquet"}


def fetch(filename: str, source: Path | None) -> Path:
    """The upstream file: under `source` (laid out as the repo) or downloaded from the Hugging Face Hub."""
    if source is not None:
        return Path(source) / filename
    from huggingface_hub import hf_hub_download

    return Path(hf_hub_download(repo_id=REPO, repo_type="dataset", filename=filename))


def read_split(path: Path) -> list[dict[str, str]]:
    import pyarrow.parquet as pq

    return pq.read_table(path, columns=["question", "answer"]).to_pylist()


def prepare(train_dir: Path, heldout_dir: Path, source: Path | None = None) -> None:
    train, test = (read_split(fetch(FILES[split], source)) for split in ("train", "test"))
    write_jsonl(Path(train_dir) / "train.jsonl", train)
    write_jsonl(Path(heldout_dir) / "test.jsonl", test)
    write_jsonl(Path(heldout_dir) / "fewshot.jsonl", train[:GSM8K_SHOTS])  # protocol a2rl's exemplars
