"""Base models as a sweep names them: a local directory, or `builtin:NAME` for models a2rl builds offline (the tiny
test model; store/modeldirs.py resolves and builds them)."""

from __future__ import annotations

import os
from pathlib import Path

from a2rl.errors import closest, unknown_name

CACHE = Path(os.environ.get("A2RL_CACHE", Path.home() / ".cache" / "a2rl"))
BUILTIN_PREFIX = "builtin:"
BUILTINS = ("tiny-llama",)


def default_data_root() -> Path:
    return CACHE / "data"


def builtin_dir(name: str) -> Path:
    return CACHE / "models" / name


def check_model_ref(path: str) -> str | None:
    """An error message for a model reference no machine can resolve (an unknown built-in), or None. Whether a
    directory exists is the launching machine's question (model_dir_problem, scheduling/readiness.py)."""
    if path.startswith(BUILTIN_PREFIX):
        name = path.removeprefix(BUILTIN_PREFIX)
        return None if name in BUILTINS else unknown_name("built-in model", name, BUILTINS)
    return None


def model_dir_problem(path: str) -> str | None:
    """An error message for a model directory that is not there (a built-in model is built at launch), or None."""
    if path.startswith(BUILTIN_PREFIX):
        return None
    p = Path(path)
    if not p.is_dir():
        hint = f" (did you mean 'builtin:{c}'?)" if (c := closest(p.name, BUILTINS)) else ""
        return f"model directory {path!r} does not exist{hint}"
    if not any(p.glob("*.safetensors")):
        return f"model directory {path!r} holds no *.safetensors weights"
    return None
