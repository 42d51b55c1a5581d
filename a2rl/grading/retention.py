"""Which of a run's frozen submissions stay on disk under `feedback: split` (storage.keep: candidates): only what
the final part (grading/final.py, grader.final) may still score. After each grading the run's recorded copies are
deleted but the one `select_final` picks among its scored entries now; copies not yet recorded (queued, being
graded) stay. That is enough for every rule: a later pick is either today's or a submission recorded later (the
best and the last of a larger set are the smaller set's or a new one; the latest marked likewise, and once one is
marked the best is never the fallback again). The ledger keeps each deleted copy's hash, lineage and scores."""

from __future__ import annotations

import logging

from a2rl.recording.diskuse import frozen_copies
from a2rl.recording.frozencopies import remove_frozen
from a2rl.spec.sweep import SweepSpec
from a2rl.store.ledger import LedgerEntry
from a2rl.store.sweepdir import SweepDir

log = logging.getLogger("a2rl.grader")


def select_final(scored: list[LedgerEntry], rule: str) -> tuple[LedgerEntry, str]:
    """The submission a run is judged by on the final part (grader.final), and the rule that picked it: the best
    on the feedback part (ties: the earliest, as the run's `best`), the last scored, or the latest the agent
    marked final (none marked: the best)."""
    best = max(scored, key=lambda e: (e.score, -e.seq))
    if rule == "last":
        return max(scored, key=lambda e: e.seq), "last"
    if rule == "agent":
        marked = [e for e in scored if e.marked_final]
        return (max(marked, key=lambda e: e.seq), "agent") if marked else (best, "agent: none marked, best-feedback")
    return best, "best-feedback"


def keeps_all(spec: SweepSpec) -> bool:
    """Every frozen copy kept after grading (storage.keep: all, or grader.keep_artifacts)."""
    return spec.storage.keep == "all" or spec.grader.keep_artifacts


def deletable(entries: list[LedgerEntry], rule: str) -> set[str]:
    """Recorded submissions the final part can no longer pick under `rule`."""
    scored = [e for e in entries if e.status == "scored"]
    keep = select_final(scored, rule)[0].submission_id if scored else None
    return {e.submission_id for e in entries if e.submission_id != keep}


def prune(sweep: SweepDir, run_id: str, rule: str) -> list[str]:
    """Delete the run's frozen copies the final part can no longer pick (and what lies beside them:
    recording/frozencopies.py); the ids deleted."""
    gone = deletable(sweep.ledger.entries(run_id), rule)
    deleted = []
    for path in frozen_copies(sweep, run_id):
        if path.name in gone and remove_frozen(path, sweep.submissions):
            deleted.append(path.name)
    if deleted:
        log.info("%s: deleted frozen copies %s (grader.final %s can no longer pick them)", run_id, deleted, rule)
    return deleted
