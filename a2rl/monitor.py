"""What a sweep is doing, read from the files its jobs write (never from the scheduler alone): a run with a
result is finished; a run whose job stopped heart-beating, or whose job is known to be gone, is lost and gets
a failed result so nothing waits for it."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from pathlib import Path

from filelock import FileLock

from a2rl.baseline import BaselineRecord, baseline_path
from a2rl.executor import JobState, local_state, slurm_states
from a2rl.records import Record, now
from a2rl.report import RunResult
from a2rl.runspec import RunSpec
from a2rl.sweepdir import STALE_S, GraderBeat, SweepDir


@dataclass
class SweepState:
    total: int = 0
    ok: int = 0
    timeout: int = 0
    failed: int = 0
    running: int = 0
    waiting: int = 0  # submitted, not started yet
    graded: int = 0
    pending_submissions: int = 0
    graders_alive: int = 0
    best: dict[str, float] = field(default_factory=dict)  # "task/agent" → best score so far
    baselines: dict[str, BaselineRecord] = field(default_factory=dict)  # "task/model" → record
    jobs: dict[str, JobState] = field(default_factory=dict)  # run_id → the scheduler's word (probed runs)

    @property
    def finished(self) -> int:
        return self.ok + self.timeout + self.failed

    def line(self, elapsed_s: float) -> str:
        parts = [f"[{int(elapsed_s) // 60:d}m{int(elapsed_s) % 60:02d}s] {self.finished}/{self.total} done",
                 f"{self.running} running", f"{self.failed} failed"]
        if self.waiting:
            parts.append(f"{self.waiting} waiting")
        parts.append(f"{self.graded} graded" + (f", {self.pending_submissions} in queue" if self.pending_submissions else ""))
        if self.best:
            parts.append("best " + ", ".join(f"{k} {v:.1f}" for k, v in sorted(self.best.items())))
        return " · ".join(parts)


class ServiceJobs(Record):
    """Jobs submitted for a sweep's services (graders, local driver servers), so status and cancel find them."""
    executor: str
    job_ids: list[str]


def record_service_job(path: Path, kind: str, job_id: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        rec = ServiceJobs.load_or_none(path) or ServiceJobs(executor=kind, job_ids=[])
        ServiceJobs(executor=kind, job_ids=[*rec.job_ids, job_id]).dump(path)


def service_jobs(sweep: SweepDir) -> list[ServiceJobs]:
    """Every service's job record: the graders' and each local driver's."""
    paths = [sweep.graders / "jobs.json", *sorted(sweep.drivers.glob("*/jobs.json"))]
    return [rec for p in paths if (rec := ServiceJobs.load_or_none(p)) is not None]


def job_states(kind: str, job_ids: list[str]) -> dict[str, JobState]:
    if kind == "slurm":
        return slurm_states(job_ids)
    return {j: local_state(j) for j in job_ids}


def jobs_alive(path: Path) -> list[str]:
    """The jobs recorded at `path` that the scheduler still has (or cannot rule out)."""
    rec = ServiceJobs.load_or_none(path)
    if rec is None:
        return []
    return [j for j, s in job_states(rec.executor, rec.job_ids).items() if s.alive is not False]


def probe_runs(sweep: SweepDir, runs: list[RunSpec]) -> dict[str, JobState]:
    """Ask the scheduler about every unfinished run's job, one query per executor kind."""
    by_kind: dict[str, dict[str, str]] = {}
    for run in runs:
        status = sweep.status(run.run_id)
        if status is None or status.job_id is None or sweep.result_path(run.run_id).exists():
            continue
        if status.executor == "local" and status.host not in (None, socket.gethostname()):
            continue  # another machine's process: only its heartbeat can tell
        by_kind.setdefault(status.executor or "local", {})[status.job_id] = run.run_id
    out = {}
    for kind, ids in by_kind.items():
        for job_id, state in job_states(kind, list(ids)).items():
            out[ids[job_id]] = state
    return out


def mark_lost(sweep: SweepDir, run: RunSpec, reason: str) -> RunResult:
    """A failed result for a run whose job ended without writing one. Published only if the job has not
    written its own meanwhile (a job's result always replaces this one)."""
    status = sweep.status(run.run_id)
    cancel = sweep.run_dir(run.run_id) / "cancelled"
    if cancel.exists():
        reason = f"cancelled by `a2rl cancel` ({reason})"
    t = now()
    result = RunResult(run_id=run.run_id, task=run.task, agent=run.agent.key, driver=run.driver, model=run.model.name,
                       seed=run.seed, status="failed", failure_reason=reason, budget_s=run.budget_s,
                       agent_seconds=status.agent_seconds if status else 0.0,
                       submissions=sweep.queue.count(run.run_id), started_at=status.heartbeat_at if status else t,
                       ended_at=t)
    if not result.publish_once(sweep.result_path(run.run_id)):
        return RunResult.load(sweep.result_path(run.run_id))
    return result


def collect(sweep: SweepDir, probe: bool = False) -> SweepState:
    """Tally the sweep; with `probe`, ask the scheduler too, and give a failed result to every run whose job
    is gone without one (or, when the scheduler cannot tell, stopped heart-beating)."""
    st = SweepState()
    runs = sweep.runs()
    st.total = len(runs)
    st.jobs = states = probe_runs(sweep, runs) if probe else {}  # before reading results: see mark_lost
    for run in runs:
        result = RunResult.load_or_none(sweep.result_path(run.run_id))
        if result is None:
            status = sweep.status(run.run_id)
            job = states.get(run.run_id, JobState(None))
            running = status is not None and status.state in ("running", "finishing") and not status.stale()
            gone = job.reason if job.alive is False else None
            if probe and job.alive is None and status is not None and status.state != "submitted" and status.stale():
                gone = f"no heartbeat for {now() - status.heartbeat_at:.0f} s (job died or node lost)"
            if gone is not None:
                result = mark_lost(sweep, run, f"job ended without a result: {gone}")
            elif running:
                st.running += 1
            else:
                st.waiting += 1
        if result is not None:
            setattr(st, result.status, getattr(st, result.status) + 1)
        for e in sweep.ledger.entries(run.run_id):
            st.graded += 1
            key = f"{run.task}/{run.agent.key}"
            if e.score is not None and e.score > st.best.get(key, float("-inf")):
                st.best[key] = e.score
    st.pending_submissions = len(sweep.queue.pending_ids())
    for beat_file in sweep.graders.glob("grader*.json"):
        beat = GraderBeat.load(beat_file)
        if beat.state != "exited" and now() - beat.heartbeat_at < STALE_S:
            st.graders_alive += 1
    for task in sweep.spec.tasks:
        for model in sweep.spec.model_entries:
            rec = BaselineRecord.load_or_none(baseline_path(sweep, task, model.name))
            if rec is not None:
                st.baselines[f"{task}/{model.name}"] = rec
    return st
