"""Run specs → jobs: submitit executors for the local machine and Slurm, job arrays that respect the cluster's
MaxArraySize, and what the scheduler knows about a job (alive, or gone and why)."""

from __future__ import annotations

import math
import os
import re
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import submitit

from a2rl.spec.clusters import SIGNAL_DELAY_S, ClusterProfile, profile_of
from a2rl.spec.registry import HOME
from a2rl.spec.sweep import SweepSpec

def resolve_kind(kind: str) -> str:
    if kind == "auto":
        return "slurm" if shutil.which("sbatch") else "local"
    return kind


def max_array_size(profile: ClusterProfile) -> int:
    """The largest array the cluster accepts: the profile's, else `scontrol show config`'s MaxArraySize."""
    if profile.max_array_size:
        return profile.max_array_size
    out = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=60).stdout
    m = re.search(r"^MaxArraySize\s*=\s*(\d+)", out, re.M)
    return int(m.group(1)) if m else 1001


def chunks(items: Sequence, size: int) -> list[Sequence]:
    return [items[i:i + size] for i in range(0, len(items), size)]


@dataclass(frozen=True)
class Shape:
    """What one job asks the scheduler for."""
    name: str
    time_s: float
    cpus: int
    gpus: int
    mem_gb: float


def make_executor(spec: SweepSpec, folder: Path, kind: str, shape: Shape) -> submitit.AutoExecutor:
    ex = submitit.AutoExecutor(folder=folder / "%j", cluster=kind)
    params: dict[str, Any] = dict(name=shape.name, timeout_min=math.ceil(shape.time_s / 60),
                                  cpus_per_task=shape.cpus, mem_gb=shape.mem_gb, gpus_per_node=shape.gpus,
                                  tasks_per_node=1, nodes=1)
    if kind == "slurm":
        prof, r = profile_of(spec), spec.resources
        pick = {k: getattr(r, k) or getattr(prof, k) for k in ("partition", "account", "qos", "constraint")}
        params.update({f"slurm_{k}": v for k, v in pick.items() if v})
        if r.array_parallelism:
            params["slurm_array_parallelism"] = r.array_parallelism
        if prof.setup:
            params["slurm_setup"] = [line.replace("{a2rl_home}", str(HOME)) for line in prof.setup]
        extra = {**prof.sbatch, **r.sbatch}
        if extra:
            params["slurm_additional_parameters"] = extra
        params["slurm_signal_delay_s"] = SIGNAL_DELAY_S
    ex.update_parameters(**params)
    return ex


def submit_array(ex: submitit.AutoExecutor, kind: str, fn: Callable, args: list[tuple],
                 array_size: int) -> list[submitit.Job]:
    """One job per argument tuple: on Slurm as arrays of at most `array_size` tasks, locally one process each."""
    if kind != "slurm":
        return [ex.submit(fn, *a) for a in args]
    jobs: list[submitit.Job] = []
    for part in chunks(args, array_size):
        with ex.batch():
            batch = [ex.submit(fn, *a) for a in part]
        jobs += batch
    return jobs


# ------------------------------------------------------------------ what the scheduler says
@dataclass(frozen=True)
class JobState:
    alive: bool | None  # None: the scheduler cannot tell
    reason: str | None = None  # why it ended, when it did
    state: str = "unknown"  # the scheduler's word for it (RUNNING, PENDING, CANCELLED...)


def slurm_states(job_ids: Iterable[str]) -> dict[str, JobState]:
    """States of Slurm jobs (array tasks as 123_4) from squeue, then sacct for those squeue no longer lists."""
    ids = sorted(set(job_ids))
    if not ids:
        return {}
    out: dict[str, JobState] = {}
    q = subprocess.run(["squeue", "-h", "-r", "-o", "%i|%T|%r", "-j", ",".join(sorted({i.split("_")[0] for i in ids}))],
                       capture_output=True, text=True, timeout=60)
    listed = {}
    for line in q.stdout.splitlines():
        jid, state, reason = (line.split("|") + ["", ""])[:3]
        listed[jid] = (state, reason)
    missing = [i for i in ids if i not in listed]
    acct: dict[str, str] = {}
    if missing:
        a = subprocess.run(["sacct", "-n", "-P", "-X", "-o", "JobID,State,ExitCode", "-j", ",".join(missing)],
                           capture_output=True, text=True, timeout=60)
        if a.returncode == 0:
            for line in a.stdout.splitlines():
                jid, state, code = (line.split("|") + ["", ""])[:3]
                acct[jid] = f"Slurm state {state} (exit code {code})"
    for i in ids:
        if i in listed:
            state, reason = listed[i]
            out[i] = JobState(True, None if state in ("RUNNING", "PENDING", "CONFIGURING", "COMPLETING",
                                                       "REQUEUED", "RESIZING", "SUSPENDED") else f"{state} {reason}",
                              state)
        elif i in acct:
            out[i] = JobState(False, acct[i], acct[i].split()[2])
        elif q.returncode == 0:
            out[i] = JobState(False, "the job is no longer known to Slurm (squeue) and sacct has no record")
        else:
            out[i] = JobState(None)
    return out


def local_state(job_id: str) -> JobState:
    """A local job's id is its controller's pid."""
    try:
        os.kill(int(job_id), 0)
    except ProcessLookupError:
        return JobState(False, f"local job process {job_id} has exited", "EXITED")
    except (ValueError, PermissionError):
        return JobState(None)
    return JobState(True, state="RUNNING")


def cancel_jobs(kind: str, job_ids: list[str]) -> None:
    if not job_ids:
        return
    if kind == "slurm":
        subprocess.run(["scancel", *job_ids], capture_output=True, timeout=60)
        return
    for jid in job_ids:  # the local controller forwards SIGTERM to the job, which stops its agent
        try:
            os.kill(int(jid), signal.SIGTERM)
        except (ProcessLookupError, ValueError):
            pass
