"""What a sweep is doing, read from the files its jobs write (never from the scheduler alone): a run with a
result is finished; a run whose job stopped heart-beating, or whose job is known to be gone, is lost.

`collect` only reads. Giving lost runs their failed result, so nothing waits for them, is the explicit
`reap_lost` (the follower, `a2rl status` and `a2rl cancel` call it)."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from pathlib import Path

from a2rl.records import RecordError
from a2rl.scheduling.base import JobState, Schedulers
from a2rl.spec.grid import RunSpec
from a2rl.store.baselines import BaselineRecord, load_baseline
from a2rl.store.results import RunResult, load_result, mark_lost
from a2rl.store.retries import read_retries, retried
from a2rl.store.services import ServiceJobs, service_jobs
from a2rl.store.sweepdir import STALE_S, GraderBeat, SweepDir


@dataclass
class SweepState:
    total: int = 0
    ok: int = 0
    timeout: int = 0
    quota: int = 0  # stopped past a cap (limits.workspace_gb)
    failed: int = 0
    running: int = 0
    running_ids: list[str] = field(default_factory=list)  # the running runs, in the sweep's order
    waiting: int = 0  # submitted, not started yet
    deferred: int = 0  # waiting for room under the queue limit (not submitted yet)
    graded: int = 0
    pending_submissions: int = 0
    ungraded: list[str] = field(default_factory=list)  # pending submissions the ledger has no entry for
    read_retries: dict[str, int] = field(default_factory=dict)  # reads retried, every process's (store/retries.py)
    graders_alive: int = 0
    graders: list[GraderBeat] = field(default_factory=list)  # every grader's last heartbeat
    best: dict[str, float] = field(default_factory=dict)  # "task/agent" → best score so far
    baselines: dict[str, BaselineRecord] = field(default_factory=dict)  # "task/model" → record
    jobs: dict[str, JobState] = field(default_factory=dict)  # run_id → the scheduler's word (probed runs)
    lost: dict[str, str] = field(default_factory=dict)  # run_id → why: its job is gone without a result
    problems: list[str] = field(default_factory=list)  # records skipped: unreadable or failing their HMAC
    # run_id → (tokens, cost $) so far, where the transcript says: the result's totals once a run has one,
    # before that what its job recorded with its last submission (reading every transcript each poll is not cheap)
    usage: dict[str, tuple[int | None, float | None]] = field(default_factory=dict)
    ended: dict[str, RunResult] = field(default_factory=dict)  # run_id → result, for runs counted finished

    @property
    def finished(self) -> int:
        return self.ok + self.timeout + self.quota + self.failed

    def run_line(self, run_id: str) -> str:
        """One finished run: how it ended, its best score against the base model's, and its tokens and cost."""
        r = self.ended[run_id]
        parts = [
            f"{run_id}: {r.status}",
            ("best —" if r.best is None else f"best {r.best:.2f}")
            + (" on the feedback part" if r.feedback == "split" else ""),
            *([f"final {r.final:.2f} ({r.final_n} items, {r.final_selected_by})"] if r.final is not None else []),
            "base model —" if r.baseline is None else f"base model {r.baseline:.2f}",
            f"{r.submissions} submission{'s' if r.submissions != 1 else ''} ({r.valid_submissions} valid)",
        ]
        tokens, cost = self.usage.get(run_id, (None, None))
        if tokens is not None:
            parts.append(f"tokens {human(tokens)}" + ("" if cost is None else f", ${cost:.2f}"))
        if r.failure_reason:
            parts.append(r.failure_reason)
        return " · ".join(parts)

    def undone_line(self) -> str:
        """What a finished sweep left ungraded, in one line ('' when nothing)."""
        if not self.ungraded:
            return ""
        return (
            f"{len(self.ungraded)} submission(s) not graded: {', '.join(self.ungraded)}; "
            "`a2rl launch` on the sweep again starts a grader for them"
        )

    def retries_line(self) -> str:
        counts = ", ".join(f"{what} {n}" for what, n in sorted(self.read_retries.items()))
        return f"reads retried (shared file system): {counts}" if counts else ""

    def line(self, elapsed_s: float) -> str:
        parts = [
            f"[{int(elapsed_s) // 60:d}m{int(elapsed_s) % 60:02d}s] {self.finished}/{self.total} done",
            f"{self.running} running",
            f"{self.failed} failed",
        ]
        if self.waiting:
            parts.append(f"{self.waiting} waiting")
        if self.deferred:
            parts.append(f"{self.deferred} deferred (queue limit)")
        parts.append(
            f"{self.graded} graded" + (f", {self.pending_submissions} in queue" if self.pending_submissions else "")
        )
        if self.best:
            parts.append("best " + ", ".join(f"{k} {v:.1f}" for k, v in sorted(self.best.items())))
        if known := [u for u in self.usage.values() if u[0] is not None]:
            costs = [c for _, c in known if c is not None]
            parts.append(
                f"tokens {human(sum(t for t, _ in known))}"
                + (f", ${sum(costs):.2f}" if costs else "")
                + f" ({len(known)} run{'s' if len(known) > 1 else ''})"
            )
        return " · ".join(parts)


def human(n: int) -> str:
    return f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.1f}k" if n >= 1e3 else str(n)


def jobs_alive(path: Path, schedulers: Schedulers) -> list[str]:
    """The jobs recorded at `path` that the scheduler still has (or cannot rule out)."""
    rec = ServiceJobs.load_or_none(path)
    if rec is None:
        return []
    return [j for j, s in schedulers[rec.executor].states(rec.job_ids).items() if s.alive is not False]


def probe_runs(sweep: SweepDir, runs: list[RunSpec], schedulers: Schedulers) -> dict[str, JobState]:
    """Ask the scheduler about every unfinished run's job and every service job: one query per executor kind
    (the service jobs' states are then in the scheduler's cache for `jobs_alive`)."""
    by_kind: dict[str, dict[str, str | None]] = {}
    for run in runs:
        status = sweep.status(run.run_id)
        if status is None or status.job_id is None or sweep.result_path(run.run_id).exists():
            continue
        if status.executor == "local" and status.host not in (None, socket.gethostname()):
            continue  # another machine's process: only its heartbeat can tell
        by_kind.setdefault(status.executor or "local", {})[status.job_id] = run.run_id
    for rec in service_jobs(sweep):
        for job_id in rec.job_ids:
            by_kind.setdefault(rec.executor, {}).setdefault(job_id, None)
    out = {}
    for kind, ids in by_kind.items():
        for job_id, state in schedulers[kind].states(list(ids)).items():
            if ids[job_id] is not None:
                out[ids[job_id]] = state
    return out


def collect(sweep: SweepDir, schedulers: Schedulers | None = None) -> SweepState:
    """Tally the sweep (reads only); given `schedulers`, ask them too, and list in `lost` every run whose
    job is gone without a result (or, when the scheduler cannot tell, stopped heart-beating)."""
    st = SweepState()
    runs = sweep.runs()
    st.total = len(runs)
    probe = schedulers is not None
    st.jobs = states = probe_runs(sweep, runs, schedulers) if probe else {}  # before reading results: see mark_lost
    ledger = sweep.ledger
    for run in runs:
        result = load_result(sweep, run.run_id, st.problems)
        if result is None:
            status = sweep.status(run.run_id)
            job = states.get(run.run_id, JobState(None))
            running = status is not None and status.state in ("running", "finishing") and not status.stale()
            gone = job.reason if job.alive is False else None
            if (
                probe
                and job.alive is None
                and status is not None
                and status.state not in ("submitted", "deferred")
                and status.stale()
            ):
                gone = f"no heartbeat for over {STALE_S:.0f} s (job died or node lost)"
            if gone is not None:
                st.lost[run.run_id] = f"job ended without a result: {gone}"
            elif running:
                st.running += 1
                st.running_ids.append(run.run_id)
            elif status is not None and status.state == "deferred":
                st.deferred += 1
            else:
                st.waiting += 1
        if result is not None and (status := sweep.status(run.run_id)) is not None and status.waiting_for_scores():
            st.running += 1  # its job completes the result with the scores it waits for
            st.running_ids.append(run.run_id)
        elif result is not None:
            setattr(st, result.status, getattr(st, result.status) + 1)
            st.ended[run.run_id] = result
        entries = ledger.entries(run.run_id)
        usage = result.usage if result is not None else None
        if usage is not None and usage.input_tokens is not None:
            st.usage[run.run_id] = usage.input_tokens + (usage.output_tokens or 0), usage.cost_usd
        elif result is None and (last := next((e for e in reversed(entries) if e.tokens is not None), None)):
            st.usage[run.run_id] = last.tokens, last.cost_usd
        for e in entries:
            st.graded += 1
            key = f"{run.task}/{run.agent.key}"
            if e.score is not None and e.score > st.best.get(key, float("-inf")):
                st.best[key] = e.score
    pending = sweep.queue.pending_ids()
    st.pending_submissions = len(pending)
    st.ungraded = [sid for sid in pending if not ledger.has(sid)]
    st.read_retries = read_retries(sweep.root)
    st.problems += ledger.problems
    for beat_file in sweep.graders.glob("grader*.json"):
        try:
            beat = retried(lambda beat_file=beat_file: GraderBeat.load(beat_file), "heartbeat")
        except RecordError as e:
            st.problems.append(str(e))
            continue
        st.graders.append(beat)
        if beat.serving():
            st.graders_alive += 1
    if st.graders_alive:  # under feedback: split a run is over once a grader has scored its final part
        for run_id, result in list(st.ended.items()):
            if result.feedback == "split" and result.final_submission is None and result.valid_submissions:
                del st.ended[run_id]
                setattr(st, result.status, getattr(st, result.status) - 1)
                st.running += 1
                st.running_ids.append(run_id)
    for task in sweep.spec.tasks:
        for model in sweep.spec.model_entries:
            for protocol in sweep.spec.protocols:
                rec = load_baseline(sweep, task, model.name, protocol, st.problems)
                if rec is not None:
                    st.baselines[f"{task}/{model.name}/{protocol}"] = rec
    return st


def reap_lost(sweep: SweepDir, st: SweepState) -> list[RunResult]:
    """Give every run `collect` found lost its failed result (unless its job wrote one meanwhile), and count it."""
    reaped = []
    for run_id, reason in st.lost.items():
        result = mark_lost(sweep, sweep.run(run_id), reason)
        setattr(st, result.status, getattr(st, result.status) + 1)
        st.ended[run_id] = result
        reaped.append(result)
    st.lost = {}
    return reaped
