"""Base models: a local directory, or `builtin:NAME` for models a2rl builds offline (the tiny test model)."""

from __future__ import annotations

import hashlib
import json
import math
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


def weights_hash(model_dir: Path) -> str:
    """Content hash of a model's tensors (name, dtype, shape, bytes), so a copy of the base model is recognised
    however it was re-saved: other shard layout, file names, metadata, tokenizer or config formatting."""
    tensors = safetensors_index(model_dir)
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


def safetensors_index(model_dir: Path) -> dict[str, tuple[Path, int, dict]]:
    """Tensor name -> (file, offset of its data section, header entry {dtype, shape, data_offsets}), read from
    the headers only (a 7B checkpoint's index costs a few reads, not 15 GB)."""
    tensors: dict[str, tuple[Path, int, dict]] = {}
    for f in sorted(Path(model_dir).glob("*.safetensors")):
        with open(f, "rb") as fh:
            n = int.from_bytes(fh.read(8), "little")
            if n > MAX_HEADER_BYTES:
                raise ValueError(f"{f}: safetensors header of {n} bytes is implausibly large")
            header = json.loads(fh.read(n))
        header.pop("__metadata__", None)
        tensors.update({name: (f, 8 + n, info) for name, info in header.items()})
    return tensors


MAX_HEADER_BYTES = 100 << 20  # safetensors' own limit
DTYPE_BYTES = {"F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2, "I16": 2,
               "U16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "I8": 1, "U8": 1, "BOOL": 1}


def parameter_count(model_dir: Path) -> int:
    """Parameters stored in the model's safetensors files (tied weights are stored, and counted, once)."""
    return sum(math.prod(info["shape"]) for _, _, info in safetensors_index(model_dir).values())


def tensor_layout(model_dir: Path) -> str:
    """Hash of the tensors' names, dtypes and shapes: two checkpoints with equal layouts load into one model."""
    index = safetensors_index(model_dir)
    return hashlib.sha256(json.dumps([[n, index[n][2]["dtype"], index[n][2]["shape"]] for n in sorted(index)])
                          .encode()).hexdigest()
