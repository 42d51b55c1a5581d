"""One scheduler interface (submit jobs, the states of job ids, cancel) with a local and a Slurm implementation
over submitit (local.py, slurm.py). A `Schedulers` holds one per executor kind, so everything a command asks
about one sweep shares one cache."""

from __future__ import annotations

import math
import shlex
import shutil
import subprocess
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Protocol

import submitit

from a2rl.spec.sweep import SweepSpec

# the scheduler's words for a job that is queued or running (squeue or sacct)
ALIVE = frozenset(
    {
        "RUNNING",
        "PENDING",
        "CONFIGURING",
        "COMPLETING",
        "REQUEUED",
        "REQUEUE_HOLD",
        "REQUEUE_FED",
        "RESIZING",
        "SUSPENDED",
        "STAGE_OUT",
        "SIGNALING",
    }
)


def resolve_kind(kind: str) -> str:
    if kind == "auto":
        return "slurm" if shutil.which("sbatch") else "local"
    return kind


@dataclass(frozen=True)
class Shape:
    """What one job asks the scheduler for."""

    name: str
    time_s: float
    cpus: int
    gpus: int
    mem_gb: float
    python: str | None = None  # the job's interpreter (submitit's `python`); None: the launcher's own
    now: bool = False  # start when resources allow: the sweep's sbatch `begin`/`hold` left out (the fs probe)


@dataclass(frozen=True)
class JobState:
    alive: bool | None  # None: the scheduler cannot tell
    reason: str | None = None  # why it ended, when it did
    state: str = "unknown"  # the scheduler's word for it (RUNNING, PENDING, CANCELLED...)


class Runner(Protocol):
    def __call__(self, argv: list[str]) -> subprocess.CompletedProcess: ...


def run_command(argv: list[str]) -> subprocess.CompletedProcess:
    """How schedulers run squeue, sacct, sacctmgr, scontrol (tests inject canned outputs instead)."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return subprocess.CompletedProcess(argv, 1, "", str(e))


class QueueFull(Exception):
    """The scheduler refused a submission for a limit (QOS, association): try again when jobs have ended."""


class Scheduler(ABC):
    kind: str

    def __init__(self, spec: SweepSpec | None = None, folder: Path | None = None):
        self.spec, self.folder = spec, folder  # what submissions need: the sweep's resources, submitit's folder

    def executor(self, shape: Shape) -> submitit.AutoExecutor:
        if self.spec is None or self.folder is None:
            raise ValueError("this scheduler was made for queries only (no sweep spec and job folder)")
        interpreter = {f"{self.kind}_python": shlex.quote(shape.python)} if shape.python else {}
        ex = submitit.AutoExecutor(folder=self.folder / "%j", cluster=self.kind, **interpreter)
        params: dict[str, Any] = dict(
            name=shape.name,
            timeout_min=math.ceil(shape.time_s / 60),
            cpus_per_task=shape.cpus,
            mem_gb=shape.mem_gb,
            gpus_per_node=shape.gpus,
            tasks_per_node=1,
            nodes=1,
        )
        ex.update_parameters(**{**params, **self.parameters(shape)})
        return ex

    def parameters(self, shape: Shape) -> dict[str, Any]:
        """Executor parameters beyond the shape's."""
        return {}

    @abstractmethod
    def submit(self, shape: Shape, fn: Callable, args: list[tuple]) -> list[str]:
        """One job per argument tuple; their ids in order. Fewer ids than tuples: the scheduler refused the
        rest for a limit (they were not submitted)."""

    def submit_one(self, shape: Shape, fn: Callable) -> str:
        """A service job (grader, driver server); QueueFull when the scheduler refuses it."""
        ids = self.submit(shape, fn, [()])
        if not ids:
            raise QueueFull(f"{self.kind} scheduler refused job {shape.name} (queue limit)")
        return ids[0]

    @abstractmethod
    def states(self, job_ids: Iterable[str]) -> dict[str, JobState]:
        """What the scheduler says about each job id."""

    @abstractmethod
    def cancel(self, job_ids: list[str]) -> None: ...

    def capacity(self) -> int | None:
        """How many more jobs may be queued now without breaking a limit; None: no limit."""
        return None


def make_scheduler(kind: str, spec: SweepSpec | None = None, folder: Path | None = None, **slurm: Any) -> Scheduler:
    """`slurm`: the Slurm scheduler's runner, clock and min_interval_s (tests inject them)."""
    if kind == "slurm":
        from a2rl.scheduling.slurm import SlurmScheduler

        return SlurmScheduler(spec, folder, **slurm)
    if kind == "local":
        from a2rl.scheduling.local import LocalScheduler

        return LocalScheduler(spec, folder)
    raise ValueError(f"unknown executor {kind!r} (local or slurm)")


class Schedulers(dict):
    """kind → Scheduler, made on first use."""

    def __init__(self, spec: SweepSpec | None = None, folder: Path | None = None, **slurm: Any):
        super().__init__()
        self.spec, self.folder, self.slurm = spec, folder, slurm

    def __missing__(self, kind: str) -> Scheduler:
        self[kind] = make_scheduler(kind, self.spec, self.folder, **self.slurm)
        return self[kind]
