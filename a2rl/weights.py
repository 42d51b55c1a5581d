"""Safetensors checkpoints read from their headers: the tensor index, a content hash (a copy of the base model is
recognised however it was re-saved), the parameter count and the tensor layout. Shared by spec (job sizing),
store (baselines), llm, grading and drivers."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path


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


def parameter_count(model_dir: Path) -> int:
    """Parameters stored in the model's safetensors files (tied weights are stored, and counted, once)."""
    return sum(math.prod(info["shape"]) for _, _, info in safetensors_index(model_dir).values())


def tensor_layout(model_dir: Path) -> str:
    """Hash of the tensors' names, dtypes and shapes: two checkpoints with equal layouts load into one model."""
    index = safetensors_index(model_dir)
    return hashlib.sha256(
        json.dumps([[n, index[n][2]["dtype"], index[n][2]["shape"]] for n in sorted(index)]).encode()
    ).hexdigest()
