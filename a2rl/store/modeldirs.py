"""Model directories on disk: resolve a sweep's model reference (building a built-in model into the cache first),
count a model's parameters, and refuse a job shape that cannot hold it (the estimates: spec/sizing.py)."""

from __future__ import annotations

from pathlib import Path

from a2rl.errors import SpecError
from a2rl.spec.models import BUILTIN_PREFIX, CACHE, builtin_dir
from a2rl.spec.roots import CACHE_FIX, guarded
from a2rl.spec.sizing import memory_need, shape_problems
from a2rl.spec.sweep import SweepSpec
from a2rl.weights import parameter_count


def resolve_model(path: str) -> Path:
    """The directory of a model, building a built-in one first if needed (offline, idempotent)."""
    if path.startswith(BUILTIN_PREFIX):
        from a2rl.store.tinymodel import build_tiny_model  # heavy imports only when a model must be built

        with guarded(CACHE, "model cache", CACHE_FIX):
            return build_tiny_model(builtin_dir(path.removeprefix(BUILTIN_PREFIX)))
    return Path(path).resolve()


def model_params(spec: SweepSpec) -> dict[str, int]:
    """Model name -> parameters, building built-in models first."""
    return {m.name: parameter_count(resolve_model(m.path)) for m in spec.model_entries}


def check_shapes(spec: SweepSpec) -> dict[str, int]:
    """Raise SpecError when a shape cannot hold a model; returns the parameter counts."""
    params = model_params(spec)
    if problems := shape_problems(spec, params):
        raise SpecError(problems)
    return params


def describe(model_dir: Path) -> str:
    p = parameter_count(model_dir)
    gpu, cpu = memory_need(p, 1), memory_need(p, 0)
    return (
        f"{p / 1e9:.3f}B parameters: GPU {gpu.gpu_gb:.1f} GiB (bf16) + host {gpu.host_gb:.1f} GiB; "
        f"CPU-only host {cpu.host_gb:.1f} GiB (fp32)"
    )
