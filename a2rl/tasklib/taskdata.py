"""Helpers for tasks' prepare and evaluator scripts: JSONL splits and distinct synthetic rows."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any, Callable


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def distinct_rows(rng: random.Random, make: Callable[[random.Random], dict[str, Any]], key: str,
                  n: int) -> list[dict[str, Any]]:
    """`n` generated rows, no two with the same `key`, so a held-out row never also appears in train."""
    seen: set[str] = set()
    rows: list[dict[str, Any]] = []
    while len(rows) < n:
        row = make(rng)
        if row[key] not in seen:
            seen.add(row[key])
            rows.append(row)
    return rows
