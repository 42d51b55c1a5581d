"""`runs/<run_id>/result.json`, built from the ledger and the baseline, never from anything in the agent's
workspace. This module is its only writer: the run's job writes it as soon as its agent has ended, listing the
submissions not graded yet (`write_result`); scores that arrive later are folded in (`refresh_result`) by the job
while it waits for them and by the grader after; reaping gives a lost run a failed one (`mark_lost`), which the
grader completes the same way: a lost run stays failed, with its reason, but its scores and best appear.
Each is signed with the sweep's key; readers get one through `load_result`, which skips (and reports) one that
does not verify. Its lock is taken with the sweep's lock timeout (filelock.Timeout past it), so a held lock never
stalls a grader."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel

from a2rl.records import RecordError, now
from a2rl.spec.grid import RunSpec
from a2rl.spec.tasks import EvalProtocol
from a2rl.store.baselines import BaselineRecord, baseline_path, load_baseline
from a2rl.store.integrity import SignedRecord
from a2rl.store.ledger import LedgerEntry
from a2rl.store.locks import SweepLock, sweep_lock
from a2rl.store.retries import retried, transient
from a2rl.store.sweepdir import SweepDir

# Told each time a run's result is written or refreshed, by whoever runs the job or grader (scheduling passes the
# run-report rebuild: grading and run never import reporting). Its failure is its own, never the caller's.
ResultHook = Callable[[SweepDir, str, "RunResult"], None]


def no_hook(sweep: SweepDir, run_id: str, result: RunResult) -> None:
    """The hook where nobody listens (a daemon or run built directly, as in tests)."""


_NO_BASELINE = "no baseline was recorded"  # the baseline_error a refresh replaces once the baseline lands


class AgentUsage(BaseModel):
    """Totals over the run's transcript. input_tokens counts every prompt token, cached ones included."""

    parser: str
    calls: int = 0  # transcript records the totals came from (results, turns, steps)
    input_tokens: int | None = None
    cached_input_tokens: int | None = None
    output_tokens: int | None = None
    cost_usd: float | None = None


class RunResult(SignedRecord):
    # 2: hmac, uncharged_seconds, setup_seconds, setup_seconds_by_attempt; 3: protocol; 4: submitted_budget_s,
    # submitted_tokens; 5: status quota, caps_hit; 6: foreign_submissions; 7: feedback, feedback_n, final*,
    # baseline_final, selection_gap
    run_id: str
    task: str
    protocol: EvalProtocol  # how the submissions and the baseline were scored
    agent: str
    driver: str
    model: str
    seed: int
    # ok: the agent ended by itself within its budget; timeout: stopped at the budget's end;
    # quota: stopped when its workspace outgrew limits.workspace_gb (failure_reason says by how much);
    # failed: the run could not complete (infrastructure or set-up error, or its job died)
    status: Literal["ok", "timeout", "quota", "failed"]
    failure_reason: str | None = None
    agent_exit_code: int | None = None
    baseline: float | None = None
    baseline_error: str | None = None
    best: float | None = None  # best scored submission; None when there is none
    best_submission: str | None = None
    improvement: float | None = None  # best - baseline
    submissions: int = 0
    valid_submissions: int = 0
    ungraded_submissions: int = 0  # still queued when the run ended
    scores: list[float | None] = []  # per submission, in order (None = invalid)
    # per graded submission, as the ledger has them: the budget clock and the agent's tokens when it was made
    # (copied here so the tables need not read every ledger entry of a large sweep)
    submitted_budget_s: list[float | None] = []
    submitted_tokens: list[int | None] = []
    # seqs of the graded submissions not plausibly trained from the base model (LedgerEntry.lineage foreign)
    foreign_submissions: list[int] = []
    budget_s: float
    agent_seconds: float = 0.0  # budget clock used (it starts when the agent process starts)
    uncharged_seconds: float = 0.0  # grading waits not charged to the budget (capped; docs/sweeps.md "The budget rule")
    setup_seconds: float = 0.0  # before the agent started (task data, model, workspace, local driver), all attempts
    setup_seconds_by_attempt: list[float] = []
    wall_seconds: float = 0.0
    started_at: float
    ended_at: float
    agent_started_at: float | None = None  # the agent process's start and end (last attempt)
    agent_ended_at: float | None = None
    cpu_seconds: float | None = None  # user + system CPU of the agent's waited-for process tree (last attempt)
    usage: AgentUsage | None = None  # tokens and cost from the transcript (stacks with a parser)
    caps_hit: list[str] = []  # the run's caps (sweep `limits`) it ran into, each named: "processes: ...", ...
    # `feedback: split` (spec/tasks.py): baseline, best and scores are on the feedback part (feedback_n items);
    # after the run the grader scores one submission (final_submission, picked by final_selected_by) on the
    # final part (final_n items), which the agent never had an answer from
    feedback: Literal["heldout", "split"] = "heldout"
    feedback_n: int | None = None
    final: float | None = None
    final_submission: str | None = None
    final_selected_by: str | None = None
    final_n: int | None = None
    final_error: str | None = None  # the final part could not be scored (weights gone, unloadable)
    baseline_final: float | None = None  # the base model on the final part
    final_improvement: float | None = None  # final - baseline_final
    selection_gap: float | None = None  # best - final: what picking on the feedback part's noise added


def build_result(
    run: RunSpec,
    *,
    status: str,
    entries: list[LedgerEntry],
    baseline: BaselineRecord | None,
    submitted: int,
    final: LedgerEntry | None = None,
    failure_reason: str | None,
    agent_exit_code: int | None,
    agent_seconds: float,
    started_at: float,
    ended_at: float,
    **recorded,
) -> RunResult:
    """`recorded`: the agent's timestamps, CPU time and usage (RunResult's fields of those names). `final`: the
    run's final-part entry (Ledger.final) under `feedback: split`."""
    scored = [e for e in entries if e.status == "scored"]
    best = max(scored, key=lambda e: e.score, default=None)
    base = baseline.score if baseline is not None and baseline.status == "ok" else None
    split = (baseline is not None and baseline.part == "feedback") or any(e.part == "feedback" for e in entries)
    base_final = baseline.final_score if split and base is not None else None
    final_score = final.score if final is not None and final.status == "scored" else None
    if split:
        recorded.update(
            feedback="split",
            feedback_n=next((e.n_items for e in entries if e.n_items is not None), None),
            final=final_score,
            final_submission=final.submission_id if final is not None else None,
            final_selected_by=final.selected_by if final is not None else None,
            final_n=final.n_items if final is not None else None,
            final_error=final.error if final is not None else None,
            baseline_final=base_final,
            final_improvement=final_score - base_final if final_score is not None and base_final is not None else None,
            selection_gap=best.score - final_score if best is not None and final_score is not None else None,
        )
    return RunResult(
        run_id=run.run_id,
        task=run.task,
        protocol=run.protocol,
        agent=run.agent.key,
        driver=run.driver,
        model=run.model.name,
        seed=run.seed,
        status=status,
        failure_reason=failure_reason,
        agent_exit_code=agent_exit_code,
        baseline=base,
        baseline_error=(
            baseline.error
            if baseline is not None and baseline.status == "failed"
            else None
            if baseline is not None
            else _NO_BASELINE
        ),
        best=best.score if best else None,
        best_submission=best.submission_id if best else None,
        improvement=(best.score - base) if best is not None and base is not None else None,
        submissions=submitted,
        valid_submissions=len(scored),
        ungraded_submissions=submitted - len(entries),
        scores=[e.score for e in entries],
        submitted_budget_s=[e.budget_used_s for e in entries],
        submitted_tokens=[e.tokens for e in entries],
        foreign_submissions=[e.seq for e in entries if e.foreign],
        budget_s=run.budget_s,
        agent_seconds=agent_seconds,
        wall_seconds=ended_at - started_at,
        started_at=started_at,
        ended_at=ended_at,
        **recorded,
    )


def result_from_ledger(sweep: SweepDir, run_id: str, **fields) -> RunResult:
    run = sweep.run(run_id)
    entries = sweep.ledger.entries(run_id)
    base = load_baseline(sweep, run.task, run.model.name, run.protocol)
    final = sweep.ledger.final(run_id)
    reason = fields.pop("failure_reason")
    submitted = sweep.queue.count(run_id)
    if len(entries) < submitted and reason is None and fields["status"] != "failed":
        reason = f"{submitted - len(entries)} submission(s) not graded yet when the run ended"
    return build_result(
        run, entries=entries, baseline=base, submitted=submitted, final=final, failure_reason=reason, **fields
    )


log = logging.getLogger("a2rl.results")


def load_result(
    sweep: SweepDir, run_id: str, problems: list[str] | None = None, raw: bytes | OSError | None = None
) -> RunResult | None:
    """The run's verified result; None when there is none or it does not load or verify (logged, and added to
    `problems` for the caller to show). `raw`: its file's bytes when the caller read them (records.read_many)."""
    path = sweep.result_path(run_id)
    try:
        if raw is not None:
            try:
                return RunResult.load_verified_or_none(path, sweep.key, raw)
            except RecordError as e:
                if not transient(e):  # read already (read_many): read again only if that read failed or came torn
                    raise
        return retried(lambda: RunResult.load_verified_or_none(path, sweep.key), "result")
    except RecordError as e:
        log.warning("%s", e)
        if problems is not None:
            problems.append(str(e))
        return None


class FinishedRuns:
    """Which of `run_ids` have a verified result. A planted, unsigned result.json must not end a service (the
    grader, a driver server) while its run still works; a run once verified stays finished, so each poll reads
    only the results still missing."""

    def __init__(self, sweep: SweepDir, run_ids: list[str]):
        self.sweep, self.run_ids, self._done = sweep, list(run_ids), set()

    def __contains__(self, run_id: str) -> bool:
        if run_id not in self._done and load_result(self.sweep, run_id) is not None:
            self._done.add(run_id)
        return run_id in self._done

    def all(self) -> bool:
        return all(run_id in self for run_id in self.run_ids)

    def any_at_work(self) -> bool:
        """Whether an unfinished run is at work now (its job running or finishing, with a fresh heartbeat) or
        will be: deferred (the top-up job submits it when the queue has room), submitted (its job queued, not
        started) or interrupted (its requeued job not started yet). A service counts its idle time only while
        none is, so a run that trains for hours before it submits, or waits for a node or for room, still finds
        its grader. A queued job cancelled outside a2rl keeps it until the follower, the top-up job or `a2rl
        status` marks that run lost (they ask the scheduler; services read only the store)."""
        for run_id in self.run_ids:
            if run_id in self:
                continue
            status = self.sweep.status(run_id)
            if status is not None and (
                status.state in ("deferred", "submitted", "interrupted")
                or status.state in ("running", "finishing")
                and not status.stale()
            ):
                return True
        return False


def _lock(sweep: SweepDir, run_id: str) -> SweepLock:
    return sweep_lock(str(sweep.result_path(run_id)) + ".lock", timeout=sweep.spec.grader.lock_timeout_s)


def write_result(sweep: SweepDir, run_id: str, **fields) -> RunResult:
    """The job's result, built from the ledger under the lock, so a score the grader records meanwhile is
    either in it or folded in by the grader's refresh after it."""
    with _lock(sweep, run_id):
        result = result_from_ledger(sweep, run_id, **fields)
        result.sign(sweep.key).dump(sweep.result_path(run_id))
    return result


# what a refresh keeps of the result it replaces; the rest is rebuilt from the ledger and the baseline
_KEPT = {
    "status",
    "agent_exit_code",
    "agent_seconds",
    "started_at",
    "ended_at",
    "agent_started_at",
    "agent_ended_at",
    "cpu_seconds",
    "usage",
    "setup_seconds",
    "setup_seconds_by_attempt",
    "uncharged_seconds",
    "caps_hit",
}


def refresh_result(sweep: SweepDir, run_id: str) -> RunResult | None:
    """Fold scores (and a baseline) recorded after the result was written into it, whoever wrote it: the job,
    or `mark_lost`. The new result, or None when there was nothing to fold in."""
    path = sweep.result_path(run_id)
    with _lock(sweep, run_id):
        old = load_result(sweep, run_id)
        if old is None:
            return None
        run = sweep.run(run_id)
        baseline_landed = (
            old.baseline_error == _NO_BASELINE and baseline_path(sweep, run.task, run.model.name, run.protocol).exists()
        )
        final_landed = old.final_submission is None and sweep.ledger.final_path(run_id).exists()
        if old.ungraded_submissions == 0 and not baseline_landed and not final_landed:
            return None
        reason = None if old.failure_reason and "not graded yet" in old.failure_reason else old.failure_reason
        new = result_from_ledger(sweep, run_id, failure_reason=reason, **old.model_dump(include=_KEPT))
        new.sign(sweep.key).dump(path)
        return new


def mark_lost(sweep: SweepDir, run: RunSpec, reason: str) -> RunResult:
    """A failed result for a run whose job ended without writing one, with what the ledger holds of its
    submissions (the rest are listed as ungraded, for the grader to fold in). Published only if the job has not
    written its own meanwhile (a job's result always replaces this one)."""
    status = sweep.status(run.run_id)
    cancel = sweep.run_dir(run.run_id) / "cancelled"
    if cancel.exists():
        reason = f"cancelled by `a2rl cancel` ({reason})"
    t = now()
    setup = status.setup_seconds if status else []
    result = result_from_ledger(
        sweep,
        run.run_id,
        status="failed",
        failure_reason=reason,
        agent_exit_code=None,
        agent_seconds=status.agent_seconds if status else 0.0,
        started_at=status.heartbeat_at if status else t,
        ended_at=t,
        setup_seconds=sum(setup),
        setup_seconds_by_attempt=setup,
    )
    if not result.sign(sweep.key).publish_once(sweep.result_path(run.run_id)):
        if (written := load_result(sweep, run.run_id)) is not None:
            return written
        result.dump(sweep.result_path(run.run_id))  # what was there was not written by this sweep
    return result
