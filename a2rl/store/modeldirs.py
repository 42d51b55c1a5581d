"""Model directories on disk: resolve a sweep's model reference (building a built-in model into the cache first),
count a model's parameters (or estimate them before the weights are there), and refuse a job shape that cannot hold
it (the estimates: spec/sizing.py)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from a2rl.errors import SpecError
from a2rl.spec.models import BUILTIN_PREFIX, CACHE, builtin_dir
from a2rl.spec.registry import HOME
from a2rl.spec.roots import CACHE_FIX, guarded
from a2rl.spec.sizing import memory_need, shape_problems
from a2rl.spec.sweep import ModelEntry, SweepSpec
from a2rl.store.tinymodel import TINY_CONFIG
from a2rl.weights import config_parameter_count, parameter_count

KNOWN_MODELS = HOME / "configs" / "models" / "params.yaml"  # well-known models' parameter counts


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


def model_dir(path: str) -> Path:
    """Where a model reference's files are (a built-in model's, built or not), building nothing."""
    return builtin_dir(path.removeprefix(BUILTIN_PREFIX)) if path.startswith(BUILTIN_PREFIX) else Path(path)


def planned_params(spec: SweepSpec) -> dict[str, tuple[int, str]]:
    """Model name -> (parameters, where the count came from), building and loading nothing: the safetensors
    headers where the weights are there, else config.json, else the entry's `params:`, else a built-in model's
    recipe, else the table of well-known models (configs/models/params.yaml). A model none of them knows is left
    out."""
    known = {k.rsplit("/", 1)[-1]: float(v) for k, v in (yaml.safe_load(KNOWN_MODELS.read_text()) or {}).items()}
    out = {}
    for m in spec.model_entries:
        if (found := _count(m, model_dir(m.path), known)) is not None:
            out[m.name] = found
    return out


def _count(m: ModelEntry, d: Path, known: dict[str, float]) -> tuple[int, str] | None:
    if any(d.glob("*.safetensors")):
        return parameter_count(d), "from its weights"
    if (d / "config.json").is_file() and (n := config_parameter_count(json.loads((d / "config.json").read_text()))):
        return n, "from its config.json"
    if m.params is not None:
        return int(m.params), "params: in the sweep"
    if m.path.startswith(BUILTIN_PREFIX):  # not built yet: its recipe's shape says as much as its weights would
        return config_parameter_count(TINY_CONFIG), "from the built-in recipe"
    for name in (d.name, m.name):
        if name in known:
            return int(known[name]), f"known-model table {KNOWN_MODELS.relative_to(HOME)}"
    return None


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
