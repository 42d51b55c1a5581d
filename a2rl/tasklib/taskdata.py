"""Helpers for tasks' prepare and evaluator scripts: JSONL splits, distinct synthetic rows and the secret seed
of a generated held-out split."""

from __future__ import annotations

import json
import os
import random
import secrets
from pathlib import Path
from typing import Any, Callable


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


SEED_FILE = "SEED"  # under heldout/, beside the split it generated
HELDOUT_SEED_ENV = "A2RL_HELDOUT_SEED"


def heldout_seed(heldout_dir: Path) -> int:
    """A seed for generating a held-out split, drawn from the OS's secret source and recorded only in
    heldout/SEED: the public generator and its fixed train seed, which an agent may know, cannot rebuild the
    held-out items (each data root draws its own). $A2RL_HELDOUT_SEED fixes it instead, for a demo whose table must
    be the same on every machine (tools/demo.sh, into its own data root): never for a benchmark, where an agent
    that knows the seed can rebuild the held-out items."""
    fixed = os.environ.get(HELDOUT_SEED_ENV)
    seed = int(fixed) if fixed else secrets.randbits(64)
    Path(heldout_dir).mkdir(parents=True, exist_ok=True)
    (Path(heldout_dir) / SEED_FILE).write_text(f"{seed}\n")
    return seed


def distinct_rows(
    rng: random.Random, make: Callable[[random.Random], dict[str, Any]], key: str, n: int, taken: set[str] = frozenset()
) -> list[dict[str, Any]]:
    """`n` generated rows, no two with the same `key` and none with a key in `taken` (a held-out row never
    also appears in train)."""
    seen: set[str] = set(taken)
    rows: list[dict[str, Any]] = []
    while len(rows) < n:
        row = make(rng)
        if row[key] not in seen:
            seen.add(row[key])
            rows.append(row)
    return rows


def write_synthetic_splits(
    train_dir: Path,
    heldout_dir: Path,
    make: Callable[[random.Random], dict[str, Any]],
    key: str,
    *,
    seed: int,
    n_train: int,
    n_heldout: int,
) -> None:
    """A generated task's two splits: train rows from the public `seed` (the same everywhere), held-out rows from
    a secret seed of this data root's (heldout/SEED, `heldout_seed`), none equal to a train row by `key`."""
    train = distinct_rows(random.Random(seed), make, key, n_train)
    heldout = distinct_rows(
        random.Random(heldout_seed(Path(heldout_dir))), make, key, n_heldout, taken={r[key] for r in train}
    )
    write_jsonl(Path(heldout_dir) / "test.jsonl", heldout)
    write_jsonl(Path(train_dir) / "train.jsonl", train)
