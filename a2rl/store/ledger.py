"""The ledger: one immutable file per graded submission, `ledger/<run_id>/<submission_id>.json`.

It lives in the sweep directory, outside every workspace, and only the grader writes it. Each entry is
published with a no-replace link, so a submission graded twice (a lease that expired under a slow grader)
is still recorded exactly once: the first result stands.

Entries carry an HMAC (store/integrity.py); one that does not verify, or does not parse, is skipped by every
reader and listed in `problems`, and a grader recording that submission replaces it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from a2rl.records import RecordError
from a2rl.spec.tasks import EvalProtocol, Part
from a2rl.store.integrity import SignedRecord

log = logging.getLogger("a2rl.ledger")


LineageVerdict = Literal["copy", "derived", "foreign"]


class TensorDistance(BaseModel):
    name: str
    cosine: float
    rel_l2: float | None  # None: the base tensor is all zeros


class Lineage(BaseModel):
    """What the ledger records of a submission's descent from the base model (grading/lineage.py computes it)."""

    verdict: LineageVerdict
    reason: str  # one line
    tokenizer: Literal["base", "identical", "same vocabulary", "different"] | None = None  # None: not compared
    tensors: int = 0  # compared
    close_share: float | None = None  # of matrix parameters, in tensors with cosine >= cosine_min
    cosine_min: float | None = None  # over matrices
    cosine_median: float | None = None
    rel_l2_median: float | None = None
    rel_l2_max: float | None = None
    cosine_threshold: float | None = None  # the verdict's (grading/lineage.py COSINE_MIN)
    farthest: list[TensorDistance] = []  # the matrices of lowest cosine
    gigabytes: float = 0.0  # of weights read (submission and base)
    seconds: float = 0.0

    def summary(self) -> str:
        if self.verdict == "copy" or self.close_share is None:
            return f"{self.verdict}: {self.reason}"
        rel = "" if self.rel_l2_median is None else f", median relative L2 {self.rel_l2_median:.3f}"
        return f"{self.verdict}: {self.reason} (median cosine {self.cosine_median:.3f}{rel})"


class LedgerEntry(SignedRecord):
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
    protocol: EvalProtocol  # how it was scored (spec/tasks.py PROTOCOLS)
    evaluator_version: int
    grader: str
    attempt: int
    eval_seconds: float = 0.0
    details: dict[str, Any] = {}
    leaks: list[str] = []  # held-out data found in the submitted files (tasklib/leaks.py)
    generation: dict[str, Any] = {}  # the generation preset it was graded with (name and every setting)
    backend: dict[str, Any] = {}  # the grader's resolved backend settings (llm/backends.py BackendSettings)
    # hash of (weights, task, evaluator version, backend settings, preset, task options): equal keys, equal scores
    grading_key: str | None = None
    cached_from: str | None = None  # the submission whose score this one reuses (same grading_key); not evaluated
    # how the grader's engine got this submission's weights: into the running engine, or a fresh one (the first,
    # another architecture, or a failed reload: grader heartbeat's reload_failures); None: not evaluated
    engine: Literal["reloaded", "started"] | None = None
    # at submission, from the run's job (QueueEntry): the budget clock used, and the agent's tokens (input +
    # output) and cost so far where its transcript reports them; what the scaling analyses plot against
    budget_used_s: float | None = None
    tokens: int | None = None
    cost_usd: float | None = None
    snapshot_error: str | None = None  # from the QueueEntry: the code record of this submission is missing, and why
    # which held-out items scored it (spec/tasks.py Part): all, or under `feedback: split` the feedback part (what
    # the agent is answered with) or, in the run's one final entry (Ledger.final), the final part
    part: Part = "heldout"
    n_items: int | None = None  # items of that part (the split's size, or the evaluator's `n`)
    marked_final: bool = False  # the agent submitted it with {"final": true}
    selected_by: str | None = None  # final entry only: the rule that picked it (grader.final)
    # descent from the sweep's base model (grading/lineage.py): copy, derived or foreign, with its figures; None: the
    # grader refused the artifact before comparing it
    lineage: Lineage | None = None

    @property
    def foreign(self) -> bool:
        return self.lineage is not None and self.lineage.verdict == "foreign"


class Ledger:
    def __init__(self, root: Path, key: bytes):
        self.root, self.key = Path(root), key
        self.problems: list[str] = []  # entries skipped because they do not load or verify, one line each
        self._listed: set[str] = set()  # run folders `listed` has seen in the root's listing (they stay)

    def path(self, sid: str) -> Path:
        run_id = sid.rsplit(".", 1)[0]
        return self.root / run_id / f"{sid}.json"

    def record(self, entry: LedgerEntry) -> bool:
        """True when this call recorded it, False when it was already recorded."""
        return self._publish(entry, self.path(entry.submission_id), lambda: self.get(entry.submission_id))

    def has(self, sid: str) -> bool:
        return self.get(sid) is not None

    def get(self, sid: str) -> LedgerEntry | None:
        path = self.path(sid)
        return self._load(path) if path.exists() else None

    def listed(self, sid: str) -> LedgerEntry | None:
        """`get` for a reader on another node polling for an entry a grader writes: the name is looked up only
        once its folder's listing shows it, for a shared file system (NFS, FUSE) answers a name looked up while
        missing as missing from its cache for up to its cache time (30 s and more), where a listing asks afresh."""
        path = self.path(sid)
        folder = path.parent.name
        try:
            if folder not in self._listed:  # made with the sweep; an older sweep's comes with its first entry
                if folder not in os.listdir(self.root):
                    return None
                self._listed.add(folder)
            shown = path.name in os.listdir(path.parent)
        except FileNotFoundError:
            return None
        return self._load(path) if shown else None

    def _load(self, path: Path) -> LedgerEntry | None:
        try:
            entry = LedgerEntry.load_verified(path, self.key)
        except RecordError as e:
            self._report(str(e))
            return None
        if self.path(entry.submission_id) != path:  # a signed entry copied under another name
            self._report(f"{path}: holds the entry of {entry.submission_id}: ignored")
            return None
        return entry

    def _report(self, problem: str) -> None:
        if problem not in self.problems:
            log.warning("%s", problem)
            self.problems.append(problem)

    def final_path(self, run_id: str) -> Path:
        """The run's final-part entry: in a folder of its own, so readers of the run's submissions never see it."""
        return self.root / run_id / "final" / f"{run_id}.json"

    def record_final(self, entry: LedgerEntry) -> bool:
        """Once per run, as `record`: True when this call recorded it."""
        path = self.final_path(entry.run_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        return self._publish(entry, path, lambda: self.final(entry.run_id))

    def _publish(self, entry: LedgerEntry, path: Path, recorded: Callable[[], LedgerEntry | None]) -> bool:
        """Signed, written once; a file there that no grader of this sweep signed (`recorded()` None) is replaced."""
        if entry.sign(self.key).publish_once(path):
            return True
        if recorded() is not None:
            return False
        log.warning("replacing %s: it was not written by a grader of this sweep", path)
        entry.dump(path)
        return True

    def final(self, run_id: str) -> LedgerEntry | None:
        """The run's final-part score (`feedback: split`, after the run), or None."""
        path = self.final_path(run_id)
        if not path.exists():
            return None
        try:
            entry = LedgerEntry.load_verified(path, self.key)
        except RecordError as e:
            self._report(str(e))
            return None
        if entry.run_id != run_id or entry.part != "final":
            self._report(f"{path}: not the final entry of {run_id}: ignored")
            return None
        return entry

    def entries(self, run_id: str) -> list[LedgerEntry]:
        loaded = (self._load(p) for p in (self.root / run_id).glob("*.json"))
        return sorted((e for e in loaded if e is not None), key=lambda e: e.seq)

    def all_entries(self) -> list[LedgerEntry]:
        return [e for d in sorted(self.root.glob("*/")) for e in self.entries(d.name)]
