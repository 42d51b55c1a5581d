"""The launcher: validates a sweep, freezes it into its directory, and submits the grader(s), the local driver
servers and every unfinished run through submitit (local processes, or Slurm); `follow` shows progress.
`Launcher.launch` is the whole launch and returns what happened (the CLI, a2rl/cli/launch.py, parses and prints).

Launching an existing sweep again (its yaml or its directory) submits only what has not finished. Runs beyond the
scheduler's queue limit are deferred and submitted as room frees up, by the follower and by a small top-up job
(so they are submitted when nobody follows). On Slurm a sweep launched without a follower always gets the top-up
job (one per sweep): it also replaces a dead last grader, which nobody else would until a relaunch. Jobs are
submitted with the run-report rebuild as their result hook: run reports are derived by reporting, which grading
and run do not import.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import submitit

from a2rl.drivers.endpoint import drivers_used, jobs_path
from a2rl.drivers.server import DriverServerJob
from a2rl.errors import SpecError
from a2rl.inspector.inspection import inspect_at_end
from a2rl.records import RecordError, now
from a2rl.reporting.runreport import rebuild_run_report
from a2rl.run.audit import AuditRecord, audited
from a2rl.run.isolation import choose
from a2rl.run.job import run_agent_job
from a2rl.scheduling.base import QueueFull, Scheduler, Schedulers, Shape, resolve_kind
from a2rl.scheduling.fscheck import checked
from a2rl.scheduling.graders import replace_dead_grader, submit_grader
from a2rl.scheduling.monitor import SweepState, collect, jobs_alive, reap_lost
from a2rl.scheduling.progress import Progress
from a2rl.scheduling.readiness import refuse_unready
from a2rl.spec.grid import RunSpec, expand
from a2rl.spec.sweep import SweepSpec, load_sweep
from a2rl.spec.tasks import get_task
from a2rl.store.locks import SweepLock, sweep_lock
from a2rl.store.modeldirs import check_shapes
from a2rl.store.results import FinishedRuns, load_result
from a2rl.store.retries import RETRIES, transient
from a2rl.store.services import record_service_job
from a2rl.store.sweepdir import RunStatus, SweepDir
from a2rl.tasklib.prepare import ensure_prepared

DEFAULT_SWEEPS = Path("a2rl-sweeps")
PROGRESS_S = 30.0  # the follower's progress block at least this often when stdout is no terminal
SUBMIT_LOCK_TIMEOUT_S = 600
TOPUP_MEM_GB = 0.5  # the top-up job only reads the sweep's files and asks the scheduler


def agent_shape(spec: SweepSpec) -> Shape:
    r = spec.resources
    return Shape(f"a2rl-{spec.name}", r.job_time_s(spec.budget), r.cpus, r.gpus, r.mem_gb)


def submit_runs(sweep: SweepDir, scheduler: Scheduler, runs: list[RunSpec]) -> list[str]:
    """Submit what fits under the scheduler's queue limit; the rest are recorded `deferred` (never failed) for
    `top_up`. Under the sweep's submit lock, so a follower and the top-up job never submit a run twice."""
    with _submit_lock(sweep):
        return _submit_locked(sweep, scheduler, runs)


def _submit_lock(sweep: SweepDir) -> SweepLock:
    sweep.jobs.mkdir(parents=True, exist_ok=True)
    return sweep_lock(str(sweep.jobs / "submit.lock"), timeout=SUBMIT_LOCK_TIMEOUT_S)


def _submit_locked(sweep: SweepDir, scheduler: Scheduler, runs: list[RunSpec]) -> list[str]:
    if not runs:
        return []
    room = scheduler.capacity()
    head = runs if room is None else runs[:room]
    ids = (
        scheduler.submit(agent_shape(sweep.spec), run_job, [(str(sweep.root), run.run_id) for run in head])
        if head
        else []
    )
    for i, run in enumerate(runs):
        submitted = i < len(ids)
        prev = sweep.status(run.run_id)
        # an interrupted run resumes: its attempts and the budget it used carry over to the new job
        carried = (
            prev.model_dump(include={"attempt", "agent_seconds", "uncharged_seconds", "setup_seconds"})
            if prev is not None and prev.state == "interrupted"
            else {}
        )
        RunStatus(
            run_id=run.run_id,
            state="submitted" if submitted else "deferred",
            job_id=ids[i] if submitted else None,
            executor=scheduler.kind,
            heartbeat_at=now(),
            **carried,
        ).dump(sweep.run_dir(run.run_id) / "status.json")
    return ids


def deferred_runs(sweep: SweepDir) -> list[RunSpec]:
    return [
        r
        for r in sweep.runs()
        if (s := sweep.status(r.run_id)) is not None
        and s.state == "deferred"
        and not sweep.result_path(r.run_id).exists()
    ]


def top_up(sweep: SweepDir, scheduler: Scheduler) -> list[str]:
    """Submit deferred runs as room frees up (the follower's loop and the top-up job call this)."""
    if not deferred_runs(sweep) or scheduler.capacity() == 0:
        return []
    with _submit_lock(sweep):
        return _submit_locked(sweep, scheduler, deferred_runs(sweep))  # read again under the lock


def run_job(sweep_dir: str, run_id: str) -> str:
    """A run's job as the launcher submits it (submitit pickles this): the run, its report rebuilt each time its
    result is written or refreshed, then the inspector's verdicts where the sweep sets `inspector:`."""
    status = run_agent_job(sweep_dir, run_id, rebuild_run_report)
    inspect_at_end(SweepDir(Path(sweep_dir)), run_id)
    return status


class TopUpJob(submitit.helpers.Checkpointable):
    """A small service job that watches the sweep when nobody follows it: every `every_s` it submits deferred runs
    as room frees up, marks runs whose job is gone lost (as the follower does) and replaces a dead last grader; it
    ends once every run has its result and nothing is pending (requeued at its time limit until then). Between
    rounds it looks at the files alone every `look_s`, so it ends seconds after the sweep does, not a round later
    (each look reads only the results still missing, stopping at the first)."""

    look_s = 5.0  # a class attribute: a top-up job pickled before it existed still runs when requeued

    def __init__(self, sweep_dir: str, kind: str, folder: str, every_s: float = 30.0):
        self.sweep_dir, self.kind, self.folder, self.every_s = sweep_dir, kind, folder, every_s

    def __call__(self) -> int:
        sweep = SweepDir(Path(self.sweep_dir))
        schedulers = Schedulers(sweep.spec, Path(self.folder))
        finished = FinishedRuns(sweep, [r.run_id for r in sweep.runs()])
        while True:
            self.wait(lambda: finished.all() and not sweep.queue.pending_ids())
            try:
                if self.round(sweep, schedulers):
                    return 0
            except Exception as e:  # a scheduler hiccup: try again next round
                print(f"top-up: failed: {e}", file=sys.stderr, flush=True)

    def wait(self, done: Callable[[], bool]) -> None:
        """Until the next round: every_s, or the first look (every look_s) that finds the sweep `done`."""
        deadline = time.monotonic() + self.every_s
        while (left := deadline - time.monotonic()) > 0:
            time.sleep(min(self.look_s, left))
            try:
                if done():
                    return
            except (OSError, RecordError) as e:  # the shared file system failing for a moment: look again
                RETRIES.note("sweep state", e)

    def round(self, sweep: SweepDir, schedulers: Schedulers) -> bool:
        """One look at the sweep; True once it is done."""
        st = collect(sweep, schedulers)
        reap_lost(sweep, st)
        if st.finished == st.total and not st.pending_submissions:
            return True
        if ids := top_up(sweep, schedulers[self.kind]):
            print(f"top-up: submitted {len(ids)} deferred run(s)", flush=True)
        if job_id := replace_dead_grader(sweep, schedulers, self.kind, st):
            print(f"top-up: no grader was alive with work left; started grader job {job_id}", flush=True)
        return False


@dataclass
class Launch:
    """What `Launcher.launch` did."""

    sweep: SweepDir
    runs: list[RunSpec]
    launcher: Launcher
    audit: AuditRecord
    refused: bool  # the audit found held-out data reachable and leaks were not allowed: nothing submitted
    finished: bool  # every run had finished and nothing was queued: nothing submitted


class Launcher:
    """Submits a sweep's services (graders, local driver servers) and its unfinished runs through one scheduler
    per executor kind, within the scheduler's queue limits, and `follow`s progress until every run has a result
    (reaping lost runs, topping up deferred ones, asking the scheduler at most every 30 s)."""

    def __init__(self, sweep: SweepDir, kind: str, schedulers: Schedulers | None = None):
        self.sweep, self.kind = sweep, kind
        self.spec = sweep.spec
        self.folder = sweep.jobs / time.strftime("%Y%m%d-%H%M%S")
        self.schedulers = schedulers if schedulers is not None else Schedulers(self.spec, self.folder)
        self.scheduler = self.schedulers[kind]
        self.jobs: dict[str, str] = {}  # run_id → job id submitted by this launcher
        self.deferred: list[str] = []  # run ids left for top-up (queue limit)
        self.grader_jobs: list[str] = []
        self.driver_jobs: list[str] = []  # local driver servers
        self.topup_jobs: list[str] = []  # the top-up job that watches the sweep
        self.params: dict[str, int] = {}  # model name -> parameters, read by prepare()

    @classmethod
    def launch(
        cls,
        target: Path,
        *,
        sweep_dir: Path | None = None,
        executor: str | None = None,
        retry_failed: bool = False,
        allow_leaks: bool = False,
        follow: bool = False,
        probe: bool = False,
    ) -> Launch:
        """The whole launch: open (or create) the sweep, prepare what its runs share, audit its isolation, and
        submit the services it lacks and its unfinished runs. `follow`: the caller follows the sweep (--wait);
        without it a Slurm sweep gets the top-up job to watch it. The sweep directory's file system is checked
        first (fscheck.py; `probe`: again, not the kept verdict). Raises SpecError, SandboxError or AuditError
        for a sweep that cannot launch."""
        sweep, runs = open_sweep(target, sweep_dir)
        launcher = cls(sweep, resolve_kind(executor or sweep.spec.executor))
        # the audit's isolation (open_sweep already refused one that does not start: scheduling/readiness.py)
        choice = choose(sweep.spec.isolation, sweep.spec.network)
        launcher.prepare()
        audit = audited(sweep, allow_leaks, choice)
        if audit.leaks and not audit.allow_leaks:
            return Launch(sweep, runs, launcher, audit, refused=True, finished=False)
        todo = pending_runs(sweep, runs, retry_failed, launcher.schedulers)
        finished = not any(not sweep.result_path(r.run_id).exists() for r in runs) and not sweep.queue.pending_ids()
        if not finished:
            fs, kept = checked(sweep.root, sweep.spec, launcher.kind, launcher.folder, probe=probe)
            print(f"file system: {fs.line()}{' (kept verdict, --probe checks again)' if kept else ''}", flush=True)
            if fs.refused:  # before anything is queued: the queue and leases need locks that exclude
                raise SpecError([fs.refused])
            # also replaces graders that are gone; on Slurm, where the sweep outlives the launcher, a watcher job
            launcher.submit(todo, watch=not follow and launcher.kind == "slurm")
        return Launch(sweep, runs, launcher, audit, refused=False, finished=finished)

    def prepare(self) -> None:
        """Offline preparation the runs share: task data, built-in models."""
        from a2rl.store.modeldirs import resolve_model

        data_root = self.sweep.data_root()
        for name in self.spec.tasks:
            print(f"preparing task {name} in {data_root} ...", flush=True)
            ensure_prepared(get_task(name, [Path(p) for p in self.spec.task_paths]), data_root)
        for m in self.spec.model_entries:
            print(f"model {m.name}: {resolve_model(m.path)}", flush=True)
        self.params = check_shapes(self.spec)  # refuse a grader or run shape that cannot hold a model

    def submit(self, runs: list[RunSpec], watch: bool = False) -> None:
        """The graders the sweep lacks, then the runs: one array per resource shape (split at MaxArraySize), as
        many as the queue limit allows, and a top-up job (first, so it has its place) where some must wait or
        `watch` asks for one. One per sweep: none while the sweep's top-up job is queued or running."""
        g, r = self.spec.grader, self.spec.resources
        alive = len(jobs_alive(self.sweep.grader_jobs, self.schedulers))
        try:
            for i in range(alive, g.first_workers):
                self.grader_jobs.append(submit_grader(self.sweep, self.scheduler, i, self.params or None))
            judge = self.spec.inspector.driver if self.spec.inspector and runs else None  # it judges each run
            for name in sorted({*drivers_used(runs), *([judge] if judge else [])}):  # before the runs, which wait
                if jobs_alive(jobs_path(self.sweep, name), self.schedulers):
                    continue
                d = self.spec.local_drivers[name]
                job_id = self.scheduler.submit_one(
                    Shape(
                        f"a2rl-driver-{name}",
                        r.job_time_s(self.spec.budget) + g.idle_timeout_s,
                        d.cpus,
                        d.gpus,
                        d.mem_gb,
                    ),
                    DriverServerJob(str(self.sweep.root), name),
                )
                self.driver_jobs.append(job_id)
                record_service_job(jobs_path(self.sweep, name), self.kind, job_id)
            room = self.scheduler.capacity()
            waits = room is not None and len(runs) > room
            if (watch or waits) and not jobs_alive(self.sweep.topup_jobs, self.schedulers):
                shape = Shape(f"a2rl-topup-{self.spec.name}", r.job_time_s(self.spec.budget), 1, 0, TOPUP_MEM_GB)
                job_id = self.scheduler.submit_one(shape, TopUpJob(str(self.sweep.root), self.kind, str(self.folder)))
                self.topup_jobs.append(job_id)
                record_service_job(self.sweep.topup_jobs, self.kind, job_id)
        except QueueFull as e:
            print(f"WARNING: {e}; relaunch the sweep when jobs have ended", flush=True)
        ids = submit_runs(self.sweep, self.scheduler, runs)
        self.jobs.update(zip((run.run_id for run in runs), ids))
        self.deferred = [run.run_id for run in runs[len(ids) :]]

    def follow(
        self,
        poll_s: float = 2.0,
        sleep: Callable[[float], None] = time.sleep,
        progress_s: float = PROGRESS_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> int:
        """Live progress until every run has a result, topping up deferred runs. Reads files every `poll_s`;
        the scheduler's own cache limits how often it is asked. Exit code 0 when no run failed. On a terminal
        one line is rewritten in place; otherwise (a log file, a Slurm job's output) a block of lines is printed
        whenever anything in it changed and at least every `progress_s` seconds."""
        t0, last, tty = clock(), "", sys.stdout.isatty()
        shown: tuple[list[str], float] = ([], float("-inf"))  # the last block printed (no terminal), and when
        progress = Progress(self.sweep)
        warned: set[str] = set()
        told: set[str] | None = None  # runs whose end was printed; those ended before following are not
        while True:
            try:
                st = collect(self.sweep, self.schedulers)
            except (RecordError, OSError) as e:  # a torn or stale read: counted, and the next poll reads again
                if not transient(e):
                    raise
                RETRIES.note("sweep state", e)
                sleep(poll_s)
                continue
            reap_lost(self.sweep, st)
            if told is None:
                told = set(st.ended)
            for run_id in sorted(st.ended.keys() - told):
                told.add(run_id)
                print(("\r" if tty else "") + st.run_line(run_id).ljust(len(last) if tty else 0), flush=True)
            if st.deferred and (ids := top_up(self.sweep, self.scheduler)):
                st.deferred, st.waiting = st.deferred - len(ids), st.waiting + len(ids)
            for key, rec in st.baselines.items():
                if rec.status == "failed" and key not in warned:
                    warned.add(key)
                    print(f"\nERROR: baseline for {key} failed: {rec.error}", flush=True)
            try:
                if job_id := replace_dead_grader(self.sweep, self.schedulers, self.kind, st):
                    print(f"\nno grader was alive with work left: started grader job {job_id}", flush=True)
            except Exception as e:  # a limit, the graders' lock held, a scheduler hiccup: the next poll tries again
                if "grader" not in warned:
                    warned.add("grader")
                    print(f"\nWARNING: no grader is alive and none could be started now ({e})", flush=True)
            line = st.line(clock() - t0)
            if tty:
                line = terminal_line(line, progress, st)
                print("\r" + line.ljust(len(last)), end="", flush=True)
            else:
                shown = log_block(line, progress, st, shown, clock(), progress_s)
            last = line
            if st.finished == st.total and not (st.ungraded and st.graders_alive):  # a grader still at them: wait
                print("\n" if tty else "", end="")
                if undone := st.undone_line():  # never end quietly with work undone
                    print(f"sweep finished with {undone}", flush=True)
                    return 1
                return 1 if st.failed else 0
            sleep(poll_s)


def terminal_line(line: str, progress: Progress, st: SweepState) -> str:
    """The follower's one line on a terminal, with each running run's progress, cut at the terminal's width."""
    import shutil

    runs = [
        f"{run_id.split('__')[1]}/{run_id.rsplit('__', 1)[-1]}: {progress.run_line(run_id)}"
        for run_id in st.running_ids
    ]
    return " · ".join([line, *runs])[: shutil.get_terminal_size().columns - 1]


def log_block(
    line: str, progress: Progress, st: SweepState, shown: tuple[list[str], float], t: float, every_s: float
) -> tuple[list[str], float]:
    """Print the progress line and a line per running run and live grader (a log file's view) when any of it
    changed or `every_s` has passed since the last print; returns what was printed last, and when."""
    block = [line, *progress.lines(st, st.running_ids)]
    old, at = shown
    same = old[1:] == block[1:] and old[:1] and old[0].split("] ", 1)[1] == line.split("] ", 1)[1]
    if same and t - at < every_s:
        return shown
    print("\n".join(block), flush=True)
    return block, t


def pending_runs(sweep: SweepDir, runs: list[RunSpec], retry_failed: bool, schedulers: Schedulers) -> list[RunSpec]:
    """Runs to submit: not finished, and no live job (asked of the scheduler once for the whole sweep, whatever
    status.json says: a PENDING or requeued job must never get a twin); failed ones too with --retry-failed."""
    todo = []
    for run in runs:
        result = load_result(sweep, run.run_id)
        if result is not None:
            if not (retry_failed and result.status == "failed"):
                continue
            os.replace(
                sweep.result_path(run.run_id), sweep.run_dir(run.run_id) / f"result.failed-{int(result.ended_at)}.json"
            )
        todo.append(run)
    by_kind: dict[str, list[str]] = {}
    for run in todo:
        if (status := sweep.status(run.run_id)) is not None and status.job_id is not None:
            by_kind.setdefault(status.executor or "local", []).append(status.job_id)
    states = {job: state for kind, ids in by_kind.items() for job, state in schedulers[kind].states(ids).items()}

    def live(run: RunSpec) -> bool:
        status = sweep.status(run.run_id)
        if status is None or status.job_id is None:
            return False
        alive = states[status.job_id].alive
        if alive is None:  # the scheduler cannot tell: trust a fresh heartbeat
            return status.state in ("running", "finishing") and not status.stale()
        return alive

    return [run for run in todo if not live(run)]


def read_target(target: Path) -> tuple[SweepSpec, list[RunSpec], SweepDir | None]:
    """A sweep.yaml's spec and runs, or an existing sweep directory's (frozen) with it; validated, nothing written
    (what --dry-run and `a2rl validate` show and what a launch opens)."""
    if target.is_dir():
        sweep = SweepDir(target)
        if not sweep.exists():
            raise SpecError([f"{target}: not a sweep directory (no sweep.json); pass a sweep.yaml"])
        return sweep.spec, sweep.runs(), sweep
    spec = load_sweep(target)
    return spec, expand(spec), None


def open_sweep(target: Path, sweep_dir: Path | None) -> tuple[SweepDir, list[RunSpec]]:
    """From a sweep.yaml (new or relaunched) or an existing sweep directory."""
    spec, runs, existing = read_target(target)
    refuse_unready(spec)  # credentials, CLIs, models, data, isolation: nothing written or submitted yet
    if existing is not None:
        return existing, runs
    sweep = SweepDir(sweep_dir or DEFAULT_SWEEPS / spec.name)
    if sweep.exists():
        frozen = sweep.spec
        if frozen != spec:
            changed = sorted(k for k in SweepSpec.model_fields if getattr(frozen, k) != getattr(spec, k))
            raise SpecError(
                [
                    f"{sweep.root} already holds sweep {frozen.name!r} with a different spec "
                    f"(changed: {', '.join(changed)}): relaunch it as it is with "
                    f"`python -m a2rl.launch {sweep.root}`, or give a new --sweep-dir"
                ]
            )
    else:
        sweep.create(spec, target.read_text(), runs)
    return sweep, runs
