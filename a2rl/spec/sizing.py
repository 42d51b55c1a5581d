"""Memory a model needs from its parameter count (x dtype), and the shape problems for which the launch refuses a
grader or run shape that cannot hold it (store/modeldirs.py counts the parameters and raises them). The default
grader memory follows the model size.

The estimates are deliberately simple and stated here, so a refusal can be argued with:
- on GPUs (bf16): weights x 1.2 (activations, a minimal KV cache) within gpus x gpu_mem_gb, and for the grader
  x gpu_memory_utilization (what vLLM may take); host memory 8 GiB (Python, torch, CUDA context) + the weights
  once (loading passes them through host memory);
- on CPU (fp32, the transformers backend): host memory 0.75 GiB (Python, torch, transformers: the tiny model's
  grader runs in a 1 GiB Slurm allocation in the test suite) + fp32 weights x 1.2.
A run's needs depend on what its agent does; the check only asks that its shape holds the weights (bf16 on its
GPUs, else fp32 in host memory).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from a2rl.spec.sweep import SweepSpec
from a2rl.units import GIB

DEFAULT_GRADER_MEM_GB = 8  # the least a grader gets, whatever the model
CPU_RUNTIME_GB = 0.75  # a CPU grader's own memory besides the weights


@dataclass(frozen=True)
class Need:
    gpu_gb: float  # in all of the job's GPUs together; 0 on CPU
    host_gb: float


def memory_need(params: int, gpus: int) -> Need:
    if gpus > 0:
        weights = params * 2 / GIB
        return Need(gpu_gb=weights * 1.2, host_gb=8 + weights)
    return Need(gpu_gb=0.0, host_gb=CPU_RUNTIME_GB + params * 4 / GIB * 1.2)


def grader_mem_gb(spec: SweepSpec, params: dict[str, int]) -> float:
    """grader.mem_gb when set, else what the largest model needs on the grader's devices (at least 8)."""
    if spec.grader.mem_gb is not None:
        return spec.grader.mem_gb
    need = max((memory_need(p, spec.grader.gpus).host_gb for p in params.values()), default=0)
    return float(max(DEFAULT_GRADER_MEM_GB, math.ceil(need)))


def shape_problems(spec: SweepSpec, params: dict[str, int]) -> list[str]:
    """One line per shape (grader, runs) that cannot hold a model, naming the field to change."""
    g, r = spec.grader, spec.resources
    problems = []
    for name, p in params.items():
        size = f"model {name!r} ({p / 1e9:.2f}B parameters)"
        need = memory_need(p, g.gpus)
        have = g.gpus * g.gpu_mem_gb * g.gpu_memory_utilization
        if g.gpus and need.gpu_gb > have:
            problems.append(
                f"grader.gpus: {size} needs {need.gpu_gb:.1f} GiB of GPU memory in bf16; grader.gpus="
                f"{g.gpus} x gpu_mem_gb={g.gpu_mem_gb:g} x gpu_memory_utilization="
                f"{g.gpu_memory_utilization:g} gives {have:.1f}: raise grader.gpus (or gpu_mem_gb)"
            )
        mem = grader_mem_gb(spec, params)
        if need.host_gb > mem:
            hint = "" if g.gpus else ", or grade on GPUs (grader.gpus)"
            problems.append(
                f"grader.mem_gb: {size} needs {need.host_gb:.1f} GiB of host memory "
                f"({'on GPUs' if g.gpus else 'on CPU in fp32'}); grader.mem_gb is {mem:g}: "
                f"raise grader.mem_gb{hint}"
            )
        # a run's needs depend on what the agent does; it must at least hold the weights
        weights = p * (2 if r.gpus else 4) / GIB
        if r.gpus and weights > r.gpus * r.gpu_mem_gb:
            problems.append(
                f"resources.gpus: {size} takes {weights:.1f} GiB in bf16; resources.gpus={r.gpus} x "
                f"gpu_mem_gb={r.gpu_mem_gb:g} cannot hold it: raise resources.gpus (or gpu_mem_gb)"
            )
        if not r.gpus and weights > r.mem_gb:
            problems.append(
                f"resources.mem_gb: {size} takes {weights:.1f} GiB in fp32 on CPU; resources.mem_gb is "
                f"{r.mem_gb:g}: raise resources.mem_gb, or give the runs GPUs (resources.gpus)"
            )
    return problems + storage_problems(spec, params)


# What a run may keep in the sweep directory (storage.run_gb) and in its workspace (limits.workspace_gb) when the
# sweep does not say: both follow the base model's parameter count, so a 7B sweep and the tiny model's both fit.
STORAGE_BYTES_PER_PARAM = 6  # the kept candidate in bf16 (2) and the next submission, frozen and graded, in fp32 (4)
STORAGE_SLACK_GB = 1.0  # code snapshots (recording.max_run_mb), logs, the run's records
WORKSPACE_BYTES_PER_PARAM = 16  # a full bf16 checkpoint (2) with its fp32 Adam state and master weights (14)
WORKSPACE_SLACK_GB = 16.0  # data, caches, the agent's tools and logs


def storage_default_gb(params: int) -> float:
    return params * STORAGE_BYTES_PER_PARAM / GIB + STORAGE_SLACK_GB


def workspace_default_gb(params: int) -> float:
    return params * WORKSPACE_BYTES_PER_PARAM / GIB + WORKSPACE_SLACK_GB


def run_storage_gb(spec: SweepSpec, params: int) -> float:
    """storage.run_gb, else the default for a base model of `params` parameters."""
    return spec.storage.run_gb or storage_default_gb(params)


def workspace_gb(spec: SweepSpec, params: int) -> float:
    """limits.workspace_gb, else the default for a base model of `params` parameters."""
    return spec.limits.workspace_gb or workspace_default_gb(params)


def storage_problems(spec: SweepSpec, params: dict[str, int]) -> list[str]:
    """storage.run_gb set below two bf16 copies of a model: the kept candidate and the next submission."""
    if spec.storage.run_gb is None:
        return []
    return [
        f"storage.run_gb: {spec.storage.run_gb:g} GiB holds fewer than two bf16 copies of model {name!r} "
        f"({p / 1e9:.2f}B parameters, {2 * p / GIB:.1f} GiB each: the kept candidate and the next submission): "
        f"raise storage.run_gb to at least {4 * p / GIB:.1f} GiB, or leave it unset (default "
        f"{storage_default_gb(p):.1f} GiB)"
        for name, p in params.items()
        if spec.storage.run_gb * GIB < 4 * p
    ]
