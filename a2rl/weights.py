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


def config_parameter_count(config: dict) -> int | None:
    """Parameters of a decoder-only transformer of the Llama/Qwen/Mistral family from its config.json alone (no
    weights): embeddings (and an untied output head), per layer the attention projections (grouped KV heads, Qwen2's
    q/k/v biases, Qwen3's q/k norms), the gated MLP and two norms, then the final norm. None where the config lacks
    a field this needs (another architecture: count its safetensors instead)."""
    try:
        hidden, layers, vocab = config["hidden_size"], config["num_hidden_layers"], config["vocab_size"]
        mlp, heads = config["intermediate_size"], config["num_attention_heads"]
    except KeyError:
        return None
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or hidden // heads
    q, kv = heads * head_dim, kv_heads * head_dim
    attention = hidden * q + 2 * hidden * kv + q * hidden
    if config.get("attention_bias") or config.get("model_type") == "qwen2":
        attention += q + 2 * kv
    if config.get("model_type") == "qwen3":
        attention += 2 * head_dim
    per_layer = attention + 3 * hidden * mlp + 2 * hidden
    heads_out = 1 if config.get("tie_word_embeddings", False) else 2
    return heads_out * vocab * hidden + layers * per_layer + hidden
