"""The final part of the grading daemon (grading/daemon.py) under `feedback: split`: once a run has ended, the
submission picked by `grader.final` is scored once on the final part of the held-out items (the agent never saw
it), and the run's frozen copies are deleted."""

from __future__ import annotations

import logging
from pathlib import Path

from a2rl.errors import InfraError
from a2rl.grading.evaluate import n_items
from a2rl.grading.grader import Grader
from a2rl.grading.record import ledger_entry
from a2rl.grading.retention import keeps_all, select_final
from a2rl.grading.trust import check_frozen
from a2rl.recording.diskuse import frozen_copies
from a2rl.recording.frozencopies import remove_entry
from a2rl.records import disk_full, now, while_full
from a2rl.spec.grid import RunSpec
from a2rl.spec.tasks import Task
from a2rl.store.baselines import BaselineRecord
from a2rl.store.ledger import LedgerEntry

log = logging.getLogger("a2rl.grader")


class FinalPart(Grader):
    """GradingDaemon's (grading/daemon.py) final part of each run under `feedback: split`."""

    def final_due(self, run_id: str) -> bool:
        """Whether the run's selected submission awaits its one final-part score: the run uses `feedback:
        split`, has ended (a verified result; its job no longer waits for scores), every submission it made is
        recorded, one of them scored, and no final entry exists yet. Never before the run has ended: until then
        its ledger entries name the feedback part only."""
        if run_id in self._final_settled or run_id not in self.finished_runs:  # the cheap checks first: polled
            return False
        run = self.sweep.run(run_id)
        if self.task(run.task).feedback_mode(run.protocol) != "split" or self.ledger.final(run_id) is not None:
            self._final_settled.add(run_id)
            return False
        status = self.sweep.status(run_id)
        if (status is not None and status.waiting_for_scores()) or any(
            sid.rsplit(".", 1)[0] == run_id for sid in self.queue.pending_ids()
        ):
            return False
        entries = self.ledger.entries(run_id)
        if len(entries) < self.queue.count(run_id):
            return False
        if not any(e.status == "scored" for e in entries):
            self._final_settled.add(run_id)  # nothing to select
            return False
        return True

    def score_final(self, run_id: str) -> LedgerEntry | None:
        """Score the run's selected submission (grader.final) on the final part, record it once (the first of
        racing graders wins), fold it into the run's result and delete the run's frozen copies. None: not now (an
        infrastructure error; retried later)."""
        run = self.sweep.run(run_id)
        task = self.task(run.task)
        pick, rule = select_final([e for e in self.ledger.entries(run_id) if e.status == "scored"], self.settings.final)
        base = self.baseline(task.name, run.model.name, run.protocol)
        t0 = now()
        self._state = "grading"
        try:
            verdict = self._final_verdict(run, task, pick, base)
        finally:
            self._state = "idle"
        if verdict is None:
            return None
        fields = dict(
            pick.model_dump(),
            part="final",
            selected_by=rule,
            claimed_at=t0,
            grader=self.holder,
            attempt=1,
            n_items=n_items(task, "final", {}),
            cached_from=None,
            grading_key=None,  # the pick's is its feedback part's: never a cache hit for the final part
            engine=None,
            details={},
            error=None,
        )
        final = ledger_entry(fields, t0=t0, **verdict)
        if while_full(lambda: self.ledger.record_final(final), f"recording the final part of {run_id}"):
            log.info("final part of %s (%s, %s): %s", run_id, pick.submission_id, rule, final.score)
        self._final_settled.add(run_id)
        if not keeps_all(self.sweep.spec):  # before the result shows the final: then nothing is left to do
            # every copy of the run, with what lies beside it: also one a job killed between numbering a
            # submission and enqueueing it left behind (no ledger entry names it; the run has ended)
            for path in frozen_copies(self.sweep, run_id, beside=True):
                try:
                    remove_entry(path, self.sweep.submissions)
                except OSError as e:
                    log.warning("%s: %s could not be deleted: %s", run_id, path.name, e)
        self.refresh(run_id)
        return self.ledger.final(run_id)

    def _final_verdict(self, run: RunSpec, task: Task, pick: LedgerEntry, base: BaselineRecord) -> dict | None:
        """The pick's status and score on the final part (the baseline's where it is the base model's copy), with
        what goes with them; None after an infrastructure error (and the pause after it)."""
        doing = f"score the final part of {run.run_id}"
        try:
            if pick.copy_of_base and base.status == "ok" and base.final_score is not None:
                return dict(status="scored", score=base.final_score)
            frozen = check_frozen(str(self.sweep.submissions / pick.submission_id), self.sweep.submissions)
            preset = self.preset(run.model.name)
            score, details = self.evaluate(task, frozen, Path(base.model_path), run.protocol, preset, "final")
            return dict(status="scored", score=score, details=details, engine=self.engine.last)
        except InfraError as e:
            self._pause(doing, e)
            return None
        except Exception as e:  # its weights are gone or do not load: the run has no final score, and says why
            if disk_full(e):
                self._pause(doing, f"no space: {e}", note=False)
                return None
            return dict(status="invalid", score=None, error=f"final part not scored: {type(e).__name__}: {e}")
