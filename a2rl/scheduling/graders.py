"""Grader jobs: the one way the launcher, the top-up job and the graders themselves (workers: auto) submit one,
the pool a grader job carries to count its peers and start another (grading/grader.py's GraderPool), and the
replacement of a dead last grader (killed, its node lost) by whoever watches the sweep: the follower
(`--wait`) and the top-up job."""

from __future__ import annotations

from pathlib import Path

from a2rl.grading.daemon import GraderJob
from a2rl.reporting.runreport import rebuild_run_report
from a2rl.scheduling.base import Scheduler, Schedulers, Shape
from a2rl.scheduling.monitor import SweepState, jobs_alive
from a2rl.spec.sizing import grader_mem_gb
from a2rl.spec.sweep import grader_python
from a2rl.store.locks import sweep_lock
from a2rl.store.modeldirs import model_params
from a2rl.store.services import record_service_job
from a2rl.store.sweepdir import SweepDir


def grader_shape(sweep: SweepDir, params: dict[str, int] | None = None) -> Shape:
    spec = sweep.spec
    g, r = spec.grader, spec.resources
    return Shape(
        f"a2rl-grader-{spec.name}",
        r.job_time_s(spec.budget) + g.idle_timeout_s,
        g.cpus,
        g.gpus,
        grader_mem_gb(spec, params or model_params(spec)),
        str(python) if (python := grader_python(spec)) else None,
    )


def submit_grader(sweep: SweepDir, scheduler: Scheduler, index: int, params: dict[str, int] | None = None) -> str:
    """Submit one grader job (QueueFull when a limit refuses it) and record it in graders/jobs.json; with
    workers auto it carries the pool through which it starts more."""
    pool = PoolOfJobs(str(sweep.root), scheduler.kind, str(scheduler.folder)) if sweep.spec.grader.autoscale else None
    job_id = scheduler.submit_one(
        grader_shape(sweep, params), GraderJob(str(sweep.root), index, rebuild_run_report, pool)
    )
    record_service_job(sweep.grader_jobs, scheduler.kind, job_id)
    return job_id


class PoolOfJobs:
    """The GraderPool of a sweep's grader jobs on one executor (pickled into each grader job): `alive` asks
    the scheduler about the jobs in graders/jobs.json; `start` submits another under the graders' lock, unless
    max_workers are alive or one of them has not started serving yet (its heartbeat missing: a grader still
    queued or loading is help on its way)."""

    def __init__(self, sweep_dir: str, kind: str, folder: str):
        self.sweep_dir, self.kind, self.folder = sweep_dir, kind, folder

    def alive(self) -> int:
        sweep = SweepDir(Path(self.sweep_dir))
        return len(jobs_alive(sweep.grader_jobs, Schedulers(sweep.spec, Path(self.folder))))

    def start(self) -> str | None:
        sweep = SweepDir(Path(self.sweep_dir))
        schedulers = Schedulers(sweep.spec, Path(self.folder))
        with sweep_lock(str(sweep.graders / "scale.lock"), timeout=sweep.spec.grader.lock_timeout_s):
            alive = len(jobs_alive(sweep.grader_jobs, schedulers))
            if alive >= sweep.spec.grader.most_workers or alive > len(sweep.serving_graders()):
                return None
            return submit_grader(sweep, schedulers[self.kind], alive)


def replace_dead_grader(sweep: SweepDir, schedulers: Schedulers, kind: str, st: SweepState) -> str | None:
    """Start one grader job where work remains (a run without its result, or a submission pending; `st` as
    collect() read it, lost runs reaped) and the scheduler has no grader job of the sweep queued or running
    (nor one it cannot rule out); its id, else None. A grader leaves only when no run is at work, queued or
    deferred, so none alive with work left means one died. Asked again under the graders' lock, so a follower
    and the top-up job looking at once start one between them (QueueFull when a limit refuses it)."""
    if st.finished == st.total and not st.pending_submissions:
        return None
    if jobs_alive(sweep.grader_jobs, schedulers):
        return None
    with sweep_lock(str(sweep.graders / "scale.lock"), timeout=sweep.spec.grader.lock_timeout_s):
        if jobs_alive(sweep.grader_jobs, schedulers):  # read again: another watcher may have just started one
            return None
        return submit_grader(sweep, schedulers[kind], 0)
