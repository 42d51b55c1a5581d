"""Base models: a local directory, or `builtin:NAME` for models a2rl builds offline (the tiny test model)."""

from __future__ import annotations

import os
from pathlib import Path

from a2rl.spec.roots import CACHE_FIX, guarded

CACHE = Path(os.environ.get("A2RL_CACHE", Path.home() / ".cache" / "a2rl"))
BUILTIN_PREFIX = "builtin:"
BUILTINS = ("tiny-llama",)


def default_data_root() -> Path:
    return CACHE / "data"


def builtin_dir(name: str) -> Path:
    return CACHE / "models" / name


def check_model_ref(path: str) -> str | None:
    """An error message for a model path that cannot work, or None."""
    if path.startswith(BUILTIN_PREFIX):
        name = path.removeprefix(BUILTIN_PREFIX)
        return None if name in BUILTINS else f"unknown built-in model {name!r} (known: {', '.join(BUILTINS)})"
    p = Path(path)
    if not p.is_dir():
        return f"model directory {path!r} does not exist"
    if not any(p.glob("*.safetensors")):
        return f"model directory {path!r} holds no *.safetensors weights"
    return None


def resolve_model(path: str) -> Path:
    """The directory of a model, building a built-in one first if needed (offline, idempotent)."""
    if path.startswith(BUILTIN_PREFIX):
        from a2rl.spec.tinymodel import build_tiny_model  # heavy imports only when a model must be built

        with guarded(CACHE, "model cache", CACHE_FIX):
            return build_tiny_model(builtin_dir(path.removeprefix(BUILTIN_PREFIX)))
    return Path(path).resolve()
