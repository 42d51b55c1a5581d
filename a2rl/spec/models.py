"""Base models: a local directory, or `builtin:NAME` for models a2rl builds offline (the tiny test model)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

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

        return build_tiny_model(builtin_dir(path.removeprefix(BUILTIN_PREFIX)))
    return Path(path).resolve()


def weights_hash(model_dir: Path) -> str:
    """Content hash of a model's tensors (name, dtype, shape, bytes), so a copy of the base model is recognised
    however it was re-saved: other shard layout, file names, metadata, tokenizer or config formatting."""
    tensors: dict[str, tuple[Path, int, dict]] = {}
    for f in sorted(Path(model_dir).glob("*.safetensors")):
        with open(f, "rb") as fh:
            n = int.from_bytes(fh.read(8), "little")
            header = json.loads(fh.read(n))
        header.pop("__metadata__", None)
        tensors.update({name: (f, 8 + n, info) for name, info in header.items()})
    h = hashlib.sha256()
    for name in sorted(tensors):
        f, data_start, info = tensors[name]
        begin, end = info["data_offsets"]
        h.update(json.dumps([name, info["dtype"], info["shape"]]).encode())
        with open(f, "rb") as fh:
            fh.seek(data_start + begin)
            left = end - begin
            while left:
                block = fh.read(min(left, 1 << 22))
                if not block:
                    raise ValueError(f"{f}: truncated safetensors file")
                h.update(block)
                left -= len(block)
    return h.hexdigest()
