"""The ledger: one immutable file per graded submission, `ledger/<run_id>/<submission_id>.json`.

It lives in the sweep directory, outside every workspace, and only the grader writes it. Each entry is
published with a no-replace link, so a submission graded twice (a lease that expired under a slow grader)
is still recorded exactly once: the first result stands.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from a2rl.records import Record


class LedgerEntry(Record):
    submission_id: str
    run_id: str
    seq: int
    submitted_at: float
    claimed_at: float  # by the grader attempt whose result this is
    graded_at: float
    status: Literal["scored", "invalid"]
    score: float | None = None  # 0–100, None when invalid
    error: str | None = None
    model_path: str
    weights_hash: str | None = None
    copy_of_base: bool = False
    task: str
    evaluator_version: int
    grader: str
    attempt: int
    eval_seconds: float = 0.0
    details: dict[str, Any] = {}


class Ledger:
    def __init__(self, root: Path):
        self.root = Path(root)

    def path(self, sid: str) -> Path:
        run_id = sid.rsplit(".", 1)[0]
        return self.root / run_id / f"{sid}.json"

    def record(self, entry: LedgerEntry) -> bool:
        """True when this call recorded it, False when it was already recorded."""
        return entry.publish_once(self.path(entry.submission_id))

    def has(self, sid: str) -> bool:
        return self.path(sid).exists()

    def get(self, sid: str) -> LedgerEntry | None:
        return LedgerEntry.load_or_none(self.path(sid))

    def entries(self, run_id: str) -> list[LedgerEntry]:
        return sorted((LedgerEntry.load(p) for p in (self.root / run_id).glob("*.json")), key=lambda e: e.seq)

    def all_entries(self) -> list[LedgerEntry]:
        return [e for d in sorted(self.root.glob("*/")) for e in self.entries(d.name)]
