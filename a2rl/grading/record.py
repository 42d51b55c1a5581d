"""The record stage of the grading daemon, and the one place a ledger entry is built: `claim_fields` (what is
known of a submission once it is claimed), `ledger_entry` (those fields and the verdict), and `Recording._record`
(the entry written once, the queue entry retired, frozen copies no longer needed deleted: grading/retention.py)."""

from __future__ import annotations

import logging
from pathlib import Path

from filelock import Timeout

from a2rl.grading.grader import Grader
from a2rl.grading.retention import keeps_all, prune
from a2rl.recording.frozencopies import remove_entry, remove_frozen, scan_path
from a2rl.records import disk_full, now, while_full
from a2rl.spec.grid import RunSpec
from a2rl.spec.tasks import Task
from a2rl.store.ledger import LedgerEntry
from a2rl.store.queue import Claim

log = logging.getLogger("a2rl.grader")


def claim_fields(claim: Claim, run: RunSpec, task: Task, holder: str, generation: dict) -> dict:
    """The ledger fields of a claimed submission that do not depend on how it scores."""
    entry, lease = claim.entry, claim.lease
    return dict(
        submission_id=entry.submission_id,
        run_id=entry.run_id,
        seq=entry.seq,
        submitted_at=entry.submitted_at,
        claimed_at=lease.claimed_at,
        model_path=entry.model_path,
        task=task.name,
        protocol=run.protocol,
        evaluator_version=task.spec.evaluator_version,
        grader=holder,
        attempt=lease.attempt,
        generation=generation,
        budget_used_s=entry.budget_used_s,
        tokens=entry.tokens,
        cost_usd=entry.cost_usd,
        snapshot_error=entry.snapshot_error,
        part=task.feedback_part(run.protocol),
        marked_final=entry.final,
    )


def ledger_entry(fields: dict, status: str, *, t0: float | None = None, **verdict) -> LedgerEntry:
    """`fields` with the verdict (`status` and what goes with it: score, error, details...), graded now; `t0`:
    when the evaluation began (None: never began, eval_seconds stays 0). A verdict field overrides a field."""
    graded_at = now()
    timing = {"graded_at": graded_at} if t0 is None else {"graded_at": graded_at, "eval_seconds": now() - t0}
    return LedgerEntry(**{**fields, **verdict, **timing, "status": status})


class Recording(Grader):
    """The record stage of GradingDaemon (grading/daemon.py)."""

    def _record(self, result: LedgerEntry, artifact: str | None) -> LedgerEntry:
        """Write the result once (the first of racing graders wins), retire its queue entry and delete its frozen
        copy (`artifact`, from the queue entry); the entry the ledger holds."""
        sid = result.submission_id
        # a full file system: the score waits for room (its lease may expire meanwhile: the first record wins)
        if while_full(lambda: self.ledger.record(result), f"recording the score of {sid}"):
            self.graded += 1
            self.refresh(result.run_id)
            verdict = f"{result.score:.2f}" if result.status == "scored" else f"invalid ({result.error})"
            log.info("graded %s: %s", sid, verdict)
        else:
            log.warning("%s was already recorded by another grader; keeping the first result", sid)
        try:
            self.queue.finish(sid)
        except Timeout as e:  # recorded: the next claim retires it
            self._held(e)
        except OSError as e:  # no room to move it to done/: recorded, the next claim retires it
            if not disk_full(e):
                raise
        self._delete(result, artifact)
        return self.ledger.get(sid) or result

    def _delete(self, result: LedgerEntry, artifact: str | None) -> None:
        """The freeze's scan where the grading did not take it (grading/frozenscan.py); the frozen copy where no
        later part needs it: under `feedback: split` the copies the final part may still pick wait for it
        (`score_final` deletes them). Through recording/frozencopies.py, the one deleter of frozen copies."""
        subs = self.sweep.submissions
        steps = [lambda: remove_entry(scan_path(Path(artifact)), subs)] if artifact else []
        keep = keeps_all(self.sweep.spec)  # `storage: keep: all`: every frozen copy stays
        if not keep and result.part == "feedback":
            steps.append(lambda: prune(self.sweep, result.run_id, self.settings.final))
        elif not keep and artifact:
            steps.append(lambda: remove_frozen(Path(artifact), subs))
        for step in steps:  # each on its own: a queue entry naming a path elsewhere never stops the pruning
            try:
                step()
            except (ValueError, OSError) as e:  # NotAFrozenCopy, or a copy that will not be renamed
                log.warning("%s: not deleting a frozen copy: %s", result.submission_id, e)
