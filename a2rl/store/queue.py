"""The submission queue: a directory on the sweep's (shared) file system, guarded by one file lock.

    queue/.lock              filelock serialising every change below
    queue/seq/<run_id>       per-run submission counter (submission ids are <run_id>.<seq>)
    queue/pending/<id>.json  QueueEntry, written once by the agent's job
    queue/leases/<id>.json   Lease held by the grader evaluating it; expires unless renewed (judged on each
                             reader's own clock: store/freshness.py)
    queue/done/<id>.json     the entry after its ledger entry exists
    queue/rejected/<id>.json a pending file that does not load or verify (written without the sweep's key)

A grader that dies stops renewing its lease; once it expires another grader (or the restarted one) claims the
entry again. The ledger, not the queue, says whether a submission was graded, so a crash between recording and
moving to done/ only leaves a stale pending entry that the next claim clears.

An idle grader notices a new entry by statting pending/ every WATCH_S (a new entry changes the directory's
mtime), and takes the lock and lists the entries only then, or every poll_s as a fallback: mtime granularity
and NFS attribute caching can hide a change, and inotify does not cross nodes.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from a2rl.records import Record, RecordError, StorageFull, atomic_write_text, now, while_full
from a2rl.store.freshness import UNREADABLE, WATCH, Watch
from a2rl.store.integrity import SignedRecord
from a2rl.store.locks import sweep_lock
from a2rl.store.retries import RETRIES, gone, retried, transient

log = logging.getLogger("a2rl.queue")

WATCH_S = 0.05  # how often an idle grader stats pending/: one stat is cheap, the lock and a listing are not


class QueueEntry(SignedRecord):
    submission_id: str
    run_id: str
    seq: int
    submitted_at: float
    model_path: str  # as the agent gave it, for the report
    artifact: str | None  # frozen snapshot the grader evaluates; None when `error` is set
    error: str | None = None  # rejected before grading (bad path, LoRA adapter...): recorded as invalid
    budget_used_s: float | None = None  # the run's budget clock at submission
    tokens: int | None = None  # the agent's input + output tokens so far (None: its transcript does not say)
    cost_usd: float | None = None
    snapshot_error: str | None = None  # why the code behind it could not be recorded (None: it was)
    final: bool = False  # the agent marks it as its pick for the final part (grader.final: agent)


class Lease(Record):
    """Who grades a submission. Readers judge it by `renewals` on their own clock (store/freshness.py); the
    writer's wall-clock stamps are for people reading the file, never compared across nodes."""

    submission_id: str
    holder: str
    claimed_at: float
    expires_at: float
    attempt: int
    renewals: int = 0  # the holder adds one at each renewal: a reader that sees it change knows the holder lives
    released: bool = False  # given back (grading could not run): free at once


@dataclass(frozen=True)
class Claim:
    entry: QueueEntry
    lease: Lease


class SubmissionQueue:
    """The file-lock queue between the runs' jobs (`submit`, signing each entry) and the graders (`claim` under
    a lease, `renew`, `release`, `finish`); entries that do not verify are set aside, never graded."""

    def __init__(self, root: Path, key: bytes, lock_timeout_s: float = 120.0, watch: Watch | None = None):
        self.root, self.key = Path(root), key
        self.watch = watch or WATCH  # what this reader saw of each lease, on its own clock
        self.pending, self.leases, self.done, self.seq, self.rejected = (
            self.root / d for d in ("pending", "leases", "done", "seq", "rejected")
        )
        for d in (self.pending, self.leases, self.done, self.seq, self.rejected):
            d.mkdir(parents=True, exist_ok=True)
        self._lock = sweep_lock(str(self.root / ".lock"), timeout=lock_timeout_s)

    def submit(
        self,
        run_id: str,
        model_path: str,
        artifact_for: Callable[[str], str | None],
        error: str | None = None,
        record: Callable[[str, int], str | None] = lambda sid, seq: None,
        **at_submit: float | int | None,
    ) -> QueueEntry:
        """Enqueue a submission. `artifact_for(submission_id)` freezes the artifact (outside the lock) and
        returns its path, then `record(submission_id, seq)` records the code behind it and returns why it
        could not (kept in the entry, so a missing record is never silent); the entry becomes visible to
        graders only after both. `at_submit`: the run's budget_used_s, tokens and cost_usd at this moment.
        A full file system is waited out at each step (records.while_full: the same submission id throughout,
        nothing enqueued until the entry is written); StorageFull when it stays full."""
        seq = while_full(lambda: self._next_seq(run_id), f"{run_id}: numbering a submission")
        sid = f"{run_id}.{seq:04d}"
        artifact = None
        if error is None:
            try:
                artifact = while_full(lambda: artifact_for(sid), f"{sid}: copying the model into the sweep")
            except StorageFull:
                raise
            except Exception as e:  # a failed snapshot is the agent's invalid submission, not our crash
                error = f"could not snapshot the model directory: {e}"
        snapshot_error = while_full(lambda: record(sid, seq), f"{sid}: recording its code")
        entry = QueueEntry(
            submission_id=sid,
            run_id=run_id,
            seq=seq,
            submitted_at=now(),
            model_path=model_path,
            artifact=artifact,
            error=error,
            snapshot_error=snapshot_error,
            **at_submit,
        ).sign(self.key)
        # atomic rename: graders never see half an entry
        while_full(lambda: entry.dump(self.pending / f"{sid}.json"), f"{sid}: enqueueing")
        return entry

    def _next_seq(self, run_id: str) -> int:
        with self._lock:
            seq = self.count(run_id) + 1
            atomic_write_text(self.seq / run_id, str(seq))
            return seq

    def claim(self, holder: str, lease_s: float, is_recorded: Callable[[str], bool]) -> Claim | None:
        """The oldest pending entry that is neither recorded nor under a live lease, now leased to `holder`.
        A lease is live until this reader has seen it unrenewed (or unreadable) for `lease_s` of its own clock."""
        t = now()
        with self._lock:
            for path in sorted(self.pending.glob("*.json"), key=_mtime_then_name):
                sid = path.stem
                if is_recorded(sid):
                    self._retire(sid)
                    continue
                old, live = self._lease_state(sid, lease_s)
                if live:
                    continue
                lease = Lease(
                    submission_id=sid,
                    holder=holder,
                    claimed_at=t,
                    expires_at=t + lease_s,
                    attempt=(old.attempt + 1) if old else 1,
                )
                if (entry := self._verified(path)) is None:
                    continue
                lease.dump(self.leases / f"{sid}.json")
                self.watch.forget(self._key(sid))
                return Claim(entry, lease)
        return None

    def _key(self, sid: str) -> tuple[str, str]:
        return (str(self.leases), sid)

    def _lease_state(self, sid: str, lease_s: float) -> tuple[Lease | None, bool]:
        """The entry's lease (None: none, or unreadable) and whether it is live on this reader's clock."""
        try:
            lease = retried(lambda: Lease.load_or_none(self.leases / f"{sid}.json"), "lease")
        except RecordError as e:
            if not transient(e):
                raise
            RETRIES.note("lease", e)  # unreadable still: expires like a silent lease
            return None, self.watch.silent_for(self._key(sid), UNREADABLE) < lease_s
        if lease is None or lease.released:
            self.watch.forget(self._key(sid))
            return lease, False
        token = (lease.holder, lease.attempt, lease.renewals)
        return lease, self.watch.silent_for(self._key(sid), token) < lease_s

    def _verified(self, path: Path) -> QueueEntry | None:
        """The pending entry at `path` if the sweep's key signed it; else it is moved to rejected/, logged,
        and never graded (nor its artifact touched). One that reads torn, stale or not at all is left for the next
        claim (counted): an entry is renamed in whole, so that is the file system's doing, not the writer's."""
        try:
            entry = retried(lambda: QueueEntry.load_verified(path, self.key), "queue entry")
            if entry.submission_id == path.stem:
                return entry
            problem = f"{path}: holds the entry of {entry.submission_id}"
        except RecordError as e:
            if gone(e):  # retired by another grader between listing and opening
                return None
            if transient(e):
                RETRIES.note("queue entry", e)  # unreadable still: the next claim tries again
                return None
            problem = str(e)
        log.warning("rejected queue entry: %s", problem)
        os.replace(path, self.rejected / path.name)
        return None

    def renew(self, sid: str, holder: str, lease_s: float) -> bool:
        """Renew a lease (one more renewal: readers see it change); False when it is no longer ours (it expired
        and someone else claimed it). An unreadable lease is left for the next renewal."""
        with self._lock:
            try:
                lease = retried(lambda: Lease.load_or_none(self.leases / f"{sid}.json"), "lease")
            except RecordError as e:
                if not transient(e):
                    raise
                RETRIES.note("lease", e)
                return True
            if lease is None or lease.holder != holder:
                return False
            lease.expires_at, lease.renewals = now() + lease_s, lease.renewals + 1
            lease.dump(self.leases / f"{sid}.json")
            return True

    def release(self, sid: str, holder: str) -> None:
        """Give a claim back without using up an attempt (grading could not run: not the submission's fault)."""
        with self._lock:
            lease = retried(lambda: Lease.load_or_none(self.leases / f"{sid}.json"), "lease")
            if lease is not None and lease.holder == holder:
                lease.released, lease.attempt = True, lease.attempt - 1
                lease.dump(self.leases / f"{sid}.json")

    def finish(self, sid: str) -> None:
        with self._lock:
            self._retire(sid)

    def _retire(self, sid: str) -> None:
        src = self.pending / f"{sid}.json"
        if src.exists():
            os.replace(src, self.done / f"{sid}.json")
        (self.leases / f"{sid}.json").unlink(missing_ok=True)
        self.watch.forget(self._key(sid))

    def entry(self, sid: str) -> QueueEntry | None:
        for d in (self.pending, self.done):
            if (d / f"{sid}.json").exists():
                return QueueEntry.load_verified(d / f"{sid}.json", self.key)
        return None

    def entries(self, run_id: str) -> list[QueueEntry]:
        """Every submission the run made that reached the queue, graded or not; unverifiable ones skipped."""
        out = []
        for p in (p for d in (self.pending, self.done) for p in d.glob(f"{run_id}.*.json")):
            try:
                out.append(retried(lambda p=p: QueueEntry.load_verified(p, self.key), "queue entry"))
            except RecordError as e:
                if not gone(e):
                    log.warning("%s", e)
        return sorted(out, key=lambda e: e.seq)

    def count(self, run_id: str) -> int:
        """How many submissions the run has made."""
        counter = self.seq / run_id
        return int(counter.read_text()) if counter.exists() else 0

    def pending_stamp(self) -> tuple[int, int, int]:
        """pending/'s mtime, size and inode: they change when an entry is added (renamed in) or removed."""
        st = os.stat(self.pending)
        return st.st_mtime_ns, st.st_size, st.st_ino

    def wait_for_change(
        self,
        stamp: tuple[int, int, int],
        timeout_s: float,
        *,
        sleep: Callable[[float], object] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> bool:
        """Stat pending/ every WATCH_S until it differs from `stamp` (True) or `timeout_s` has passed (False;
        the caller lists the queue anyway). Take `stamp` before listing, so an entry added meanwhile counts."""
        deadline = clock() + timeout_s
        while (left := deadline - clock()) > 0:
            if self.pending_stamp() != stamp:
                return True
            sleep(min(WATCH_S, left))
        return False

    def pending_ids(self) -> list[str]:
        return sorted(p.stem for p in self.pending.glob("*.json"))

    def oldest_wait(self, t: float, lease_s: float) -> float:
        """How long at `t` the oldest pending entry that no live lease holds (on this reader's clock) has waited
        (0: none waits), by its file's mtime (an entry is written once, when submitted): no lock and no
        verification, a hint for starting another grader, never for grading (a clock off by a minute starts one
        a minute early or late)."""
        oldest = t
        for path in self.pending.glob("*.json"):
            try:
                if not self._lease_state(path.stem, lease_s)[1]:
                    oldest = min(oldest, path.stat().st_mtime)
            except (RecordError, OSError):  # retired or rewritten meanwhile
                continue
        return t - oldest


def _mtime_then_name(p: Path) -> tuple[float, str]:
    try:
        return (p.stat().st_mtime, p.name)
    except FileNotFoundError:
        return (0.0, p.name)


def holder_id(role: str) -> str:
    return f"{role}@{socket.gethostname()}:{os.getpid()}"
