"""The reference pipeline's process: its rank (rank 0 alone saves, submits and records), its log lines, its devices
and how it launches its training processes (`accelerate launch`; DeepSpeed optional)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import torch

T0 = time.monotonic()


def log(msg: str) -> None:
    if is_main():
        print(f"[pipeline {time.monotonic() - T0:6.1f}s] {msg}", flush=True)


def is_main() -> bool:
    """The process that saves, submits and records (rank 0 under `accelerate launch`; the only one otherwise)."""
    return int(os.environ.get("RANK", "0")) == 0


def gpu_count(environ: dict[str, str], cuda_available: bool, device_count: int) -> int:
    """The run's GPUs: those the job made visible (CUDA_VISIBLE_DEVICES, as Slurm sets it), else all CUDA sees."""
    if not cuda_available:
        return 0
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return device_count
    return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])


def launch_command(
    argv: list[str], processes: int, cuda: bool, deepspeed_config: Path | None, port: int = 0
) -> list[str] | None:
    """`accelerate launch` of this module with `processes` training processes (one per GPU; gloo on CPU); None when
    this process should train itself (one process without DeepSpeed, or already a launched worker)."""
    if "LOCAL_RANK" in os.environ or (processes <= 1 and deepspeed_config is None):
        return None
    # port 0: a free one, so that two jobs on one node do not meet at torchrun's default port
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--num_processes",
        str(processes),
        "--num_machines",
        "1",
        "--main_process_port",
        str(port or free_port()),
        "--mixed_precision",
        "bf16" if cuda else "no",
    ]
    if deepspeed_config is not None:  # accelerate takes one of --use_deepspeed and --multi_gpu
        cmd += ["--use_deepspeed", "--deepspeed_config_file", str(deepspeed_config)]
    else:  # torchrun's workers; on CPU they join a gloo group (accelerate's MULTI_CPU)
        cmd.append("--multi_gpu")
    return cmd + ["--module", "a2rl.reference.pipeline", *argv]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def deepspeed_on_cpu() -> None:
    """DeepSpeed's CPU all-reduce kernel is C++ built at its first use (a compiler, and about 5 minutes on 2 cores in
    every fresh HOME); without it DeepSpeed all-reduces through gloo, as it does where no compiler is found."""
    import deepspeed.ops

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False


def device_args(cuda: bool) -> dict:
    # TRL defaults assume a GPU: on this CPU bf16 is ~9x slower, so CPU runs train in fp32.
    return dict(bf16=cuda, use_cpu=not cuda)


def train_dtype() -> torch.dtype:
    return torch.bfloat16 if torch.cuda.is_available() else torch.float32
