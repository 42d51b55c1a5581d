"""The grading daemon: claims submissions from the sweep's queue under a lease, evaluates them on the held-out
split, and records each result in the ledger. It is its own process (its own job); several may serve one queue.

It exits when every run of the sweep has its result and nothing is pending, or after an idle limit: that long
with nothing to grade while no run of the sweep is at work, queued or deferred (store/results.py any_at_work).
With `grader.workers: auto` the graders scale themselves through a GraderPool (the scheduler's side,
scheduling/graders.py): one whose oldest unclaimed submission has waited `scale_wait_s` starts another grader
job (up to `max_workers`), and one with nothing to claim for `scale_idle_s` leaves while another grader serves
the queue, never the last.

A submission passes its stages in order: claim (`GradingDaemon.grade`, under a renewed lease), verify, lineage
and score (grading/stages.py), record (grading/record.py, where every ledger entry is built); under `feedback:
split` a run's pick is scored once more on the final part when the run has ended (grading/final.py). What the
stages share is grading/grader.py; scaling is grading/scaling.py; the evaluation itself grading/evaluate.py.

It trusts nothing it reads from the shared file system: queue entries must carry the sweep's HMAC (the queue
rejects others), the artifact must be a frozen copy directly under submissions/ whose files pass
grading/trust.py, it deletes only such copies, and a lock held past the sweep's lock timeout costs a round (a
log line), never the daemon.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Callable, TypeVar

import submitit
from filelock import Timeout

from a2rl.errors import InfraError
from a2rl.grading.final import FinalPart
from a2rl.grading.grader import GraderPool
from a2rl.grading.record import Recording, claim_fields, ledger_entry
from a2rl.grading.scaling import Scaling
from a2rl.grading.stages import Scoring
from a2rl.records import RecordError, disk_full, now, while_full
from a2rl.store.ledger import LedgerEntry
from a2rl.store.queue import Claim
from a2rl.store.results import ResultHook, no_hook
from a2rl.store.retries import RETRIES, transient
from a2rl.store.sweepdir import SweepDir

log = logging.getLogger("a2rl.grader")
T = TypeVar("T")


class GradingDaemon(Scaling, Scoring, Recording, FinalPart):
    """Claims submissions from the sweep's queue under a lease, checks that the frozen artifact is trustworthy
    (verify), compares it with the base model (lineage), scores it on the held-out split (score: grading/stages.py),
    records it once in the ledger and folds it into the run's result (record: grading/record.py). Computes the
    baselines first; exits when the sweep is done or after its idle limit."""

    def run(self) -> int:
        self._beat()  # at once: a grader pool counts a started grader without a heartbeat as still starting
        beat = threading.Thread(target=self._heartbeat_loop, daemon=True)
        beat.start()
        try:
            for task_name in self.spec.tasks:
                for model in self.spec.model_entries:
                    for protocol in self.spec.protocols:
                        self.baseline(task_name, model.name, protocol, retry_failed=True)
            for run in self.sweep.runs():  # results written while no baseline was recorded yet
                self.refresh(run.run_id)
            idle_since = quiet_since = self.clock()
            while True:
                seen = self._survive(self.queue.pending_stamp, (0, 0, 0), "queue")
                # the lock only when there is something to claim: an idle grader lists pending/ and no more
                try:
                    claim = self._survive(
                        lambda: (
                            while_full(
                                lambda: self.queue.claim(self.holder, self.settings.lease_s, self.ledger.has),
                                "claiming a submission",
                            )
                            if self.queue.pending_ids()
                            else None
                        ),
                        None,
                        "queue",
                    )
                except Timeout as e:
                    self._held(e)
                    claim = None
                if claim is not None:
                    self.grade(claim)
                    idle_since = quiet_since = self.clock()
                    self.scale_up()
                    continue
                if (due := next((r for r in self.run_ids if self.final_due(r)), None)) is not None:
                    self.score_final(due)
                    idle_since = self.clock()
                    continue
                if self._survive(self.sweep_finished, False, "sweep state"):
                    self._note = "every run has finished"
                    return 0
                self.scale_up()
                if self._survive(self.finished_runs.any_at_work, True, "status"):
                    idle_since = self.clock()
                elif self.clock() - idle_since > self.settings.idle_timeout_s:
                    self._note = f"idle for {self.settings.idle_timeout_s:g} s with no run at work, queued or deferred"
                    return 0
                if self.clock() - quiet_since > self.settings.scale_idle_s and self.leave_to_others():
                    return 0
                if self._survive(lambda seen=seen: self._wait_for_change(seen), None, "queue") is None:
                    self.sleep(self.settings.poll_s)
        finally:
            self._state = "exited"
            self._stop.set()
            self._beat()
            log.info("grader %s exits (%s), graded %d", self.holder, self._note, self.graded)

    def _wait_for_change(self, seen: tuple[int, int, int]) -> bool:
        return self.queue.wait_for_change(seen, self.settings.poll_s, sleep=self.sleep, clock=self.clock)

    def _survive(self, read: Callable[[], T], default: T, what: str) -> T:
        """A read of the shared sweep directory; one that came torn, stale or not at all is counted and `default`
        stands until the next poll reads again: no read error ends a grader."""
        try:
            return read()
        except (RecordError, OSError) as e:
            if not transient(e) or isinstance(e, OSError) and disk_full(e):
                raise
            RETRIES.note(what, e)
            return default

    def sweep_finished(self) -> bool:
        """Every run has its result, nothing is pending, and no job still waits to complete its result (a run
        stopped at its budget's end writes its result before its wrap-up submission is enqueued)."""
        return (
            self.finished_runs.all()
            and not self.queue.pending_ids()
            and not any((s := self.sweep.status(r)) is not None and s.waiting_for_scores() for r in self.run_ids)
            and not any(self.final_due(r) for r in self.run_ids)
        )

    def grade(self, claim: Claim) -> LedgerEntry | None:
        """The claim stage: grade one claimed submission under its lease (renewed meanwhile) and record it. None:
        an infrastructure error; the claim is released and retried after a pause, using no attempt."""
        entry, lease = claim.entry, claim.lease
        run = self.sweep.run(entry.run_id)
        task = self.task(run.task)
        fields = claim_fields(claim, run, task, self.holder, self.preset(run.model.name).record())
        t0 = now()
        self._state = "grading"
        renewing = threading.Event()
        renewer = threading.Thread(target=self._renew_loop, args=(entry.submission_id, renewing), daemon=True)
        renewer.start()
        try:
            if lease.attempt > self.settings.max_attempts:
                result = ledger_entry(
                    fields,
                    "invalid",
                    error=f"grading failed {lease.attempt - 1} times (the grader died while "
                    f"evaluating it); not retried",
                )
            elif entry.error is not None:
                result = ledger_entry(fields, "invalid", error=entry.error)
            else:
                result = self._score(entry.artifact, run.model.name, task, fields, t0)
        except InfraError as e:
            while_full(lambda: self.queue.release(entry.submission_id, self.holder), f"releasing {entry.submission_id}")
            self._pause(f"grade {entry.submission_id}", e)
            return None
        finally:
            renewing.set()
            renewer.join()
            self._state = "idle"
        return self._record(result, entry.artifact)

    def _renew_loop(self, sid: str, done: threading.Event) -> None:
        while not done.wait(self.settings.lease_s / 3):
            try:
                renewed = self.queue.renew(sid, self.holder, self.settings.lease_s)
            except Timeout as e:  # try again next time; the lease outlives a few missed renewals
                self._held(e)
                continue
            except OSError as e:  # a full disk, or the shared file system failing for a moment: next time
                if not disk_full(e):
                    RETRIES.note("lease", e)
                log.warning("lease on %s not renewed: %s", sid, e.strerror)
                continue
            if not renewed:
                log.warning("lost the lease on %s; another grader may grade it too (first result wins)", sid)
                return
            self.scale_up()  # a long evaluation must not hide a backlog (the main loop checks between claims)


class GraderJob(submitit.helpers.Checkpointable):
    """The grader as a job: at its time limit submitit calls checkpoint() and requeues it (the submission it
    was grading is claimed again once its lease expires)."""

    def __init__(self, sweep_dir: str, index: int = 0, on_result: ResultHook = no_hook, pool: GraderPool | None = None):
        self.sweep_dir, self.index, self.on_result, self.pool = sweep_dir, index, on_result, pool

    def __call__(self) -> int:
        return run_grader(self.sweep_dir, self.index, self.on_result, self.pool)


def run_grader(sweep_dir: str, index: int = 0, on_result: ResultHook = no_hook, pool: GraderPool | None = None) -> int:
    """Serve the sweep's queue until the sweep is done."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    sweep = SweepDir(Path(sweep_dir))
    threads = sweep.spec.grader.cpus
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    return GradingDaemon(sweep, index, on_result, pool).run()
