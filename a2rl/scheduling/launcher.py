"""The launcher: validates a sweep, freezes it into its directory, and submits the grader(s), the local driver
servers and every unfinished run through submitit (local processes, or Slurm); `follow` shows progress.

Launching an existing sweep again (its yaml or its directory) submits only what has not finished.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path
from typing import Iterator

import submitit

from a2rl.spec.agents import agent_registry
from a2rl.errors import SpecError
from a2rl.scheduling.executor import Shape, make_executor, max_array_size, profile_of, submit_array
from a2rl.drivers.endpoint import drivers_used, jobs_path
from a2rl.drivers.server import DriverServerJob
from a2rl.grading.daemon import GraderJob
from a2rl.run.job import run_agent_job
from a2rl.scheduling.monitor import collect, jobs_alive, reap_lost
from a2rl.store.services import record_service_job
from a2rl.records import now
from a2rl.store.results import load_result
from a2rl.spec.grid import RunSpec, expand
from a2rl.spec.sweep import SweepSpec, load_sweep, local_driver_name
from a2rl.store.sweepdir import RunStatus, SweepDir
from a2rl.spec.tasks import get_task

DEFAULT_SWEEPS = Path("a2rl-sweeps")


@contextlib.contextmanager
def _detached(log: Path) -> Iterator[None]:
    """Local jobs outlive the launcher: they must not hold its terminal (stdout pipes, Ctrl-C)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    saved = [os.dup(1), os.dup(2)]
    old_int = signal.signal(signal.SIGINT, signal.SIG_IGN)  # inherited by the job processes
    sys.stdout.flush(), sys.stderr.flush()
    with open(log, "ab") as f:
        os.dup2(f.fileno(), 1), os.dup2(f.fileno(), 2)
    try:
        yield
    finally:
        sys.stdout.flush(), sys.stderr.flush()
        os.dup2(saved[0], 1), os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)
        signal.signal(signal.SIGINT, old_int)


class Launcher:
    def __init__(self, sweep: SweepDir, kind: str):
        self.sweep, self.kind = sweep, kind
        self.spec = sweep.spec
        self.folder = sweep.jobs / time.strftime("%Y%m%d-%H%M%S")
        self.jobs: dict[str, submitit.Job] = {}  # run_id → job submitted by this launcher
        self.grader_jobs: list[submitit.Job] = []
        self.driver_jobs: list[submitit.Job] = []  # local driver servers

    def prepare(self) -> None:
        """Offline preparation the runs share: task data, built-in models."""
        from a2rl.spec.models import resolve_model

        data_root = self.sweep.data_root()
        for name in self.spec.tasks:
            print(f"preparing task {name} in {data_root} ...", flush=True)
            get_task(name, [Path(p) for p in self.spec.task_paths]).ensure_prepared(data_root)
        for m in self.spec.model_entries:
            print(f"model {m.name}: {resolve_model(m.path)}", flush=True)

    def submit(self, runs: list[RunSpec]) -> None:
        """The graders the sweep lacks, then the runs: one array per resource shape (split at MaxArraySize)."""
        g, r = self.spec.grader, self.spec.resources
        alive = len(jobs_alive(self.sweep.grader_jobs))
        grader_ex = make_executor(self.spec, self.folder, self.kind, Shape(
            f"a2rl-grader-{self.spec.name}", r.job_time_s(self.spec.budget) + g.idle_timeout_s, g.cpus, g.gpus,
            g.mem_gb))
        agent_ex = make_executor(self.spec, self.folder, self.kind, Shape(
            f"a2rl-{self.spec.name}", r.job_time_s(self.spec.budget), r.cpus, r.gpus, r.mem_gb))
        array_size = max_array_size(profile_of(self.spec)) if self.kind == "slurm" else 1
        with self._submission_context():
            for i in range(alive, g.workers):
                job = grader_ex.submit(GraderJob(str(self.sweep.root), i))
                self.grader_jobs.append(job)
                record_service_job(self.sweep.grader_jobs, self.kind, str(job.job_id))
            for name in drivers_used(runs):  # before the runs, which wait for them
                if jobs_alive(jobs_path(self.sweep, name)):
                    continue
                d = self.spec.local_drivers[name]
                ex = make_executor(self.spec, self.folder, self.kind, Shape(
                    f"a2rl-driver-{name}", r.job_time_s(self.spec.budget) + g.idle_timeout_s, d.cpus, d.gpus,
                    d.mem_gb))
                job = ex.submit(DriverServerJob(str(self.sweep.root), name))
                self.driver_jobs.append(job)
                record_service_job(jobs_path(self.sweep, name), self.kind, str(job.job_id))
            jobs = submit_array(agent_ex, self.kind, run_agent_job,
                                [(str(self.sweep.root), run.run_id) for run in runs], array_size)
        for run, job in zip(runs, jobs):
            self.jobs[run.run_id] = job
            RunStatus(run_id=run.run_id, state="submitted", job_id=str(job.job_id), executor=self.kind,
                      heartbeat_at=now()).dump(self.sweep.run_dir(run.run_id) / "status.json")

    def _submission_context(self) -> contextlib.AbstractContextManager:
        return _detached(self.folder / "local-controllers.log") if self.kind == "local" else contextlib.nullcontext()

    def follow(self, poll_s: float = 2.0) -> int:
        """Live progress until every run has a result. Exit code 0 when no run failed."""
        t0, last, tty = time.monotonic(), "", sys.stdout.isatty()
        warned: set[str] = set()
        while True:
            st = collect(self.sweep, probe=True)
            reap_lost(self.sweep, st)
            for key, rec in st.baselines.items():
                if rec.status == "failed" and key not in warned:
                    warned.add(key)
                    print(f"\nERROR: baseline for {key} failed: {rec.error}", flush=True)
            if st.graders_alive == 0 and st.pending_submissions and "grader" not in warned \
                    and not any(jobs_alive(self.sweep.grader_jobs)):
                warned.add("grader")
                print(f"\nWARNING: {st.pending_submissions} submission(s) queued but no grader is running; "
                      f"relaunch the sweep to start one", flush=True)
            line = st.line(time.monotonic() - t0)
            if tty:
                print("\r" + line.ljust(len(last)), end="", flush=True)
            elif line.split("] ", 1)[1] != last.split("] ", 1)[-1]:
                print(line, flush=True)
            last = line
            if st.finished == st.total:
                print("\n" if tty else "", end="")
                return 1 if st.failed else 0
            time.sleep(poll_s)


def pending_runs(sweep: SweepDir, runs: list[RunSpec], retry_failed: bool) -> list[RunSpec]:
    """Runs to submit: not finished, not alive; failed ones too with --retry-failed."""
    todo = []
    for run in runs:
        result = load_result(sweep, run.run_id)
        if result is not None:
            if not (retry_failed and result.status == "failed"):
                continue
            os.replace(sweep.result_path(run.run_id),
                       sweep.run_dir(run.run_id) / f"result.failed-{int(result.ended_at)}.json")
        status = sweep.status(run.run_id)
        if status is not None and status.state in ("running", "finishing") and not status.stale():
            continue
        todo.append(run)
    return todo


def check_credentials(spec: SweepSpec) -> None:
    """Credentials are the launcher's to give: a missing one fails here, not hours later in a queued job."""
    agents = agent_registry([Path(p) for p in spec.agent_paths])
    problems = []
    for i, a in enumerate(spec.agent_entries):
        stack = agents.get(a.name)
        drivers = spec.drivers_of(a) if stack.needs_driver else ["none"]
        missing = {name for d in drivers for name in stack.missing_credentials(os.environ, local_driver_name(d) is not None)}
        problems += [f"agents[{i}]: agent {a.name!r} needs {name}, which is not set" for name in sorted(missing)]
    if problems:
        raise SpecError(problems)


def open_sweep(target: Path, sweep_dir: Path | None) -> tuple[SweepDir, list[RunSpec]]:
    """From a sweep.yaml (new or relaunched) or an existing sweep directory."""
    if target.is_dir():
        sweep = SweepDir(target)
        if not sweep.exists():
            raise SpecError([f"{target}: not a sweep directory (no sweep.json); pass a sweep.yaml"])
        check_credentials(sweep.spec)
        return sweep, sweep.runs()
    spec = load_sweep(target)
    check_credentials(spec)
    runs = expand(spec)
    sweep = SweepDir(sweep_dir or DEFAULT_SWEEPS / spec.name)
    if sweep.exists():
        frozen = sweep.spec
        if frozen != spec:
            changed = sorted(k for k in SweepSpec.model_fields if getattr(frozen, k) != getattr(spec, k))
            raise SpecError([f"{sweep.root} already holds sweep {frozen.name!r} with a different spec "
                             f"(changed: {', '.join(changed)}): relaunch it as it is with "
                             f"`python -m a2rl.launch {sweep.root}`, or give a new --sweep-dir"])
    else:
        sweep.create(spec, target.read_text(), runs)
    return sweep, runs
