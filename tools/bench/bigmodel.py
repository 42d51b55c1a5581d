"""A paper-size checkpoint to test the submission path with: Qwen2.5-7B-shaped, written at about disk speed.

    .venv/bin/python tools/bench/bigmodel.py --params 7.6e9 --dtype bf16 OUT [--variants trained,lora,foreign]

OUT/base is a Qwen2-architecture checkpoint as Hugging Face saves it: config.json, generation_config.json, a small
byte-level BPE tokenizer built here (the tiny model's recipe, a2rl/store/tinymodel.py; no hub), and sharded
safetensors (at most --shard-gb each) with model.safetensors.index.json. At 7.6e9 parameters the shapes are
Qwen2.5-7B's (28 layers, hidden 3584, MLP 18944, 28 heads with 4 key/value heads, vocabulary 152064, untied
output head: 7.62e9 parameters, 15.2 GB in bf16); other sizes scale the width and the vocabulary with sqrt(P).

Weights are not drawn per element (7.6e9 Gaussian draws take minutes): each 2-D tensor is a 64 MiB block of
N(0, 0.02) values tiled from a per-tensor offset, so writing costs what the disk costs. Variants beside it:
  trained  the base plus small noise on every tensor (+-1 unit in the last place of bf16, ~0.4 % relative L2)
  lora     the base plus a rank-16 change to every q_proj and v_proj (relative L2 ~0.1 on those)
  foreign  the same shape from another random block (an unrelated model: cosine ~0 to the base)
Every variant shares the base's config and tokenizer, so lineage reaches its weight comparison.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import zlib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
QWEN7B = dict(hidden=3584, intermediate=18944, layers=28, heads=28, kv_heads=4, vocab=152064)
BLOCK = 1 << 25  # elements per random block (64 MiB in bf16)
DTYPES = {"bf16": ("BF16", "bfloat16", 2), "fp32": ("F32", "float32", 4)}
VARIANTS = ("trained", "lora", "foreign")


def shape_for(params: float) -> dict:
    """Qwen2.5-7B's shape scaled so that the parameter count is about `params`."""
    s = math.sqrt(params / 7.62e9)
    head_dim = max(8, round(128 * s / 8) * 8)
    return dict(
        QWEN7B,
        hidden=28 * head_dim,
        intermediate=max(64, round(QWEN7B["intermediate"] * s / 64) * 64),
        vocab=max(2048, round(QWEN7B["vocab"] * s / 64) * 64),
    )


def tensors(shape: dict) -> list[tuple[str, list[int]]]:
    """Name and shape of every tensor, in the order Hugging Face's Qwen2 state dict has them."""
    h, i, kv = shape["hidden"], shape["intermediate"], shape["kv_heads"] * shape["hidden"] // shape["heads"]
    out = [("model.embed_tokens.weight", [shape["vocab"], h])]
    for n in range(shape["layers"]):
        p = f"model.layers.{n}."
        out += [
            (p + "self_attn.q_proj.weight", [h, h]),
            (p + "self_attn.q_proj.bias", [h]),
            (p + "self_attn.k_proj.weight", [kv, h]),
            (p + "self_attn.k_proj.bias", [kv]),
            (p + "self_attn.v_proj.weight", [kv, h]),
            (p + "self_attn.v_proj.bias", [kv]),
            (p + "self_attn.o_proj.weight", [h, h]),
            (p + "mlp.gate_proj.weight", [i, h]),
            (p + "mlp.up_proj.weight", [i, h]),
            (p + "mlp.down_proj.weight", [h, i]),
            (p + "input_layernorm.weight", [h]),
            (p + "post_attention_layernorm.weight", [h]),
        ]
    return out + [("model.norm.weight", [h]), ("lm_head.weight", [shape["vocab"], h])]


def config(shape: dict, dtype: str) -> dict:
    return {
        "architectures": ["Qwen2ForCausalLM"],
        "attention_dropout": 0.0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "hidden_act": "silu",
        "hidden_size": shape["hidden"],
        "initializer_range": 0.02,
        "intermediate_size": shape["intermediate"],
        "max_position_embeddings": 32768,
        "max_window_layers": shape["layers"],
        "model_type": "qwen2",
        "num_attention_heads": shape["heads"],
        "num_hidden_layers": shape["layers"],
        "num_key_value_heads": shape["kv_heads"],
        "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0,
        "sliding_window": 131072,
        "tie_word_embeddings": False,
        "torch_dtype": DTYPES[dtype][1],
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": shape["vocab"],
    }


def random_block(seed: int, dtype: str) -> np.ndarray:
    """BLOCK values of N(0, 0.02) in `dtype`'s bytes (bf16: the float32's upper half, as uint16)."""
    x = np.random.default_rng(seed).standard_normal(BLOCK, dtype=np.float32) * np.float32(0.02)
    if dtype != "bf16":
        return x
    u = (x.view(np.uint32) >> 16).astype(np.uint16)
    u[(u & 0x7F80) == 0] = 0x0080  # no zeros or subnormals: the trained variant's -1 ulp never wraps to NaN
    return u


def to_f32(a: np.ndarray) -> np.ndarray:
    return (a.astype(np.uint32) << 16).view(np.float32) if a.dtype == np.uint16 else a.astype(np.float32)


def from_f32(x: np.ndarray, like: np.dtype) -> np.ndarray:
    if like == np.uint16:  # round to nearest even, as torch's bfloat16 conversion does
        u = x.astype(np.float32).view(np.uint32)
        return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return x.astype(like)


class Writer:
    """Streams one variant's tensors into shards. `content(name, shape, start, count)` gives elements
    [start, start+count) of the flattened tensor; written in pieces of at most BLOCK elements."""

    def __init__(self, dest: Path, dtype: str, shard_bytes: int):
        self.dest, self.dtype, self.shard_bytes = dest, dtype, shard_bytes

    def write(self, layout: list[tuple[str, list[int]]], content) -> None:
        tag, _, size = DTYPES[self.dtype]
        shards, cur, used = [], [], 0
        for name, shape in layout:
            n = math.prod(shape) * size
            if cur and used + n > self.shard_bytes:
                shards.append(cur)
                cur, used = [], 0
            cur.append((name, shape))
            used += n
        shards.append(cur)
        weight_map, total = {}, 0
        for k, shard in enumerate(shards):
            fname = f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
            header, off = {"__metadata__": {"format": "pt"}}, 0
            for name, shape in shard:
                n = math.prod(shape) * size
                header[name] = {"dtype": tag, "shape": shape, "data_offsets": [off, off + n]}
                off += n
                weight_map[name] = fname
            raw = json.dumps(header, separators=(",", ":")).encode()
            raw += b" " * (-len(raw) % 8)
            with open(self.dest / fname, "wb", buffering=0) as f:
                f.write(len(raw).to_bytes(8, "little") + raw)
                for name, shape in shard:
                    count = math.prod(shape)
                    for start in range(0, count, BLOCK):
                        f.write(
                            memoryview(np.ascontiguousarray(content(name, shape, start, min(BLOCK, count - start))))
                        )
            total += off
        index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
        (self.dest / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")


def tiled(block: np.ndarray, offset: int, start: int, count: int) -> np.ndarray:
    """Elements [start, start+count) of `block` repeated from `offset`."""
    a = (offset + start) % len(block)
    if a + count <= len(block):
        return block[a : a + count]
    return np.concatenate((block[a:], block[: a + count - len(block)]))  # count <= len(block): two pieces


def offset_of(name: str) -> int:
    return zlib.crc32(name.encode()) % BLOCK


def base_content(block: np.ndarray, dtype: str):
    one = from_f32(np.ones(1, np.float32), block.dtype)[0]

    def content(name: str, shape: list[int], start: int, count: int) -> np.ndarray:
        if name.endswith("norm.weight"):
            return np.full(count, one, dtype=block.dtype)
        return tiled(block, offset_of(name), start, count)

    return content


def trained_content(base, noise: np.ndarray, dtype: str):
    """The base plus small noise: bf16 moves by -1, 0 or +1 unit in the last place (integer adds: no float
    round trip); fp32 by the noise block x 1e-4."""

    def content(name, shape, start, count):
        b = base(name, shape, start, count)
        step = tiled(noise, offset_of(name) // 7, start, count)
        if b.dtype == np.uint16:  # -1 is 0xFFFF: adds wrap mod 2**16 (the blocks hold no zeros to wrap past)
            return np.add(b, step.view(np.uint16), dtype=np.uint16)
        return b + step.astype(np.float32) * np.float32(1e-4)

    return content


def lora_content(base, shape_info: dict, rank: int = 16):
    """The base plus A @ B (rank `rank`) on every q_proj and v_proj: ~10 % of the matrix's norm."""
    cache: dict[str, np.ndarray] = {}

    def delta(name, shape):
        if name not in cache:
            rng = np.random.default_rng(zlib.crc32(name.encode()))
            a = rng.standard_normal((shape[0], rank), dtype=np.float32)
            b = rng.standard_normal((rank, shape[1]), dtype=np.float32)
            cache.clear()  # one matrix's delta at a time
            cache[name] = ((a @ b) * np.float32(0.002 / math.sqrt(rank))).reshape(-1)
        return cache[name]

    def content(name, shape, start, count):
        b = base(name, shape, start, count)
        if not (name.endswith("q_proj.weight") or name.endswith("v_proj.weight")):
            return b
        return from_f32(to_f32(b) + delta(name, shape)[start : start + count], b.dtype)

    return content


def tokenizer_into(dest: Path) -> None:
    """The tiny model's tokenizer files (built here, offline)."""
    sys.path.insert(0, str(ROOT))
    from a2rl.store.modeldirs import resolve_model

    tiny = resolve_model("builtin:tiny-llama")
    for f in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (tiny / f).is_file():
            (dest / f).write_bytes((tiny / f).read_bytes())


def write_model(dest: Path, params: float, dtype: str, variant: str = "base", shard_gb: float = 4.0) -> Path:
    shape = shape_for(params)
    layout = tensors(shape)
    dest.mkdir(parents=True, exist_ok=False)
    (dest / "config.json").write_text(json.dumps(config(shape, dtype), indent=2) + "\n")
    (dest / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": 2}) + "\n")
    tokenizer_into(dest)
    base = base_content(random_block(1 if variant == "foreign" else 0, dtype), dtype)
    if variant == "trained":
        steps = np.random.default_rng(2).integers(-1, 2, BLOCK + 1, dtype=np.int16)
        content = trained_content(base, steps, dtype)
    elif variant == "lora":
        content = lora_content(base, shape)
    else:
        content = base
    Writer(dest, dtype, int(shard_gb * 1e9)).write(layout, content)
    return dest


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", type=Path, help="directory to write base/ (and the variants) into")
    p.add_argument("--params", type=float, default=7.6e9)
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    p.add_argument("--variants", default="", help=f"comma-separated, of {','.join(VARIANTS)} (default: none)")
    p.add_argument("--shard-gb", type=float, default=4.0, help="largest shard (Hugging Face's default: 5 GB)")
    p.add_argument("--no-base", action="store_true", help="write only the variants")
    args = p.parse_args()
    wanted = [v for v in args.variants.split(",") if v]
    if bad := [v for v in wanted if v not in VARIANTS]:
        raise SystemExit(f"unknown variant(s) {bad}: pick from {', '.join(VARIANTS)}")
    n = sum(math.prod(s) for _, s in tensors(shape_for(args.params)))
    for variant in ([] if args.no_base else ["base"]) + wanted:
        t0 = time.perf_counter()
        d = write_model(args.out / variant, args.params, args.dtype, variant, args.shard_gb)
        gb = sum(f.stat().st_size for f in d.glob("*.safetensors")) / 1e9
        fd = os.open(d, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
        os.sync()
        s = time.perf_counter() - t0
        print(f"{variant}: {n / 1e9:.2f}e9 parameters, {gb:.2f} GB in {s:.1f} s ({gb / s:.2f} GB/s, synced) -> {d}")


if __name__ == "__main__":
    main()
