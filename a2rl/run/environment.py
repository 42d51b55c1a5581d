"""Where and with what each attempt of a run ran: `runs/<id>/env-<attempt>.json`, written by the run's job."""

from __future__ import annotations

import os
import platform
import socket
from importlib import metadata
from pathlib import Path

from a2rl.records import Record, now


class RunEnvironment(Record):
    """Where and with what an attempt of a run ran: `runs/<id>/env-<attempt>.json`."""

    attempt: int
    host: str
    executor: str
    job_id: str | None
    slurm: dict[str, str]  # SLURM_JOB_ID, SLURM_ARRAY_*, SLURM_RESTART_COUNT, SLURM_JOB_GPUS ...
    cuda_visible_devices: str | None
    python: str
    packages: dict[str, str]
    started_at: float


def job_identity() -> tuple[str, str | None]:
    """(executor kind, job id as submitit names it: 123_4 for array tasks)."""
    try:
        import submitit

        env = submitit.JobEnvironment()
        return env.cluster, env.job_id
    except RuntimeError:  # run outside submitit (tests driving a run directly)
        return "none", None


def record_environment(path: Path, attempt: int) -> None:
    kind, job_id = job_identity()
    packages = {}
    for name in ("a2rl", "torch", "transformers", "trl", "peft", "accelerate", "submitit", "vllm"):
        try:
            packages[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    RunEnvironment(
        attempt=attempt,
        host=socket.gethostname(),
        executor=kind,
        job_id=job_id,
        slurm={
            k: v
            for k, v in os.environ.items()
            if k.startswith("SLURM_")
            and k.split("_", 1)[1].startswith(("JOB", "ARRAY", "RESTART", "STEP_GPUS", "CPUS"))
        },
        cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
        python=platform.python_version(),
        packages=packages,
        started_at=now(),
    ).dump(path)
