"""Lineage of a submission against the sweep's base model: was it plausibly trained from this base?

The grader checks it on the frozen copy before scoring. Same architecture (config's model_type and architectures,
and the tensors' names and shapes; dtypes may differ) and the same tokenizer (the one the grader would load: the
submission's own files byte-identical to the base's, or an equal vocabulary), then per tensor the cosine
similarity and the relative L2 distance ||s - b|| / ||b|| to the base, streamed from the safetensors files one
slice at a time (never the whole model in memory, no GPU).
The grader's figures come from a sample of each tensor taken in the same read as the content hash
(grading/onepass.py, judged here by `judge`); `tensor_distances` compares every element (calibration, and the
fallback for a dtype the sample is not read from).

Verdicts: `copy` (the base's tensors, however re-saved: the weights hash), `derived` (most weight-matrix parameters
lie in tensors whose cosine to the base is at least COSINE_MIN), `foreign` (anything else: another architecture or
tokenizer, or weights no closer to the base than an independently initialised model's). Only matrices (2-D and
up) vote: norm weights start as ones in every initialisation, so they say nothing about descent.

Limits: a model the base's publisher post-trained from the same base (an instruct release) is `derived` too; so is
any model fine-tuned from the base outside the sandbox. Lineage says where the weights came from, not who trained them.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Callable, Literal

from a2rl.store.ledger import Lineage, TensorDistance
from a2rl.units import GB
from a2rl.weights import safetensors_index

# Calibrated on the tiny model's real training runs on this CPU (tools/bench/lineage.py --calibrate; figures in
# docs/grading.md): the reference pipeline's full SFT at its default learning rate (3e-3) for 700 steps keeps every
# matrix at cosine >= 0.196 to the base (its embeddings; the median matrix 0.53), LoRA-merged and shorter runs
# higher; models of the same shape from another seed, untrained or trained on the same rows, stay within 0.021 of 0
# (chance for a 128 x 128 matrix: sd 0.008). 0.1 lies about 2x below the first and 5x above the second.
COSINE_MIN = 0.1
CLOSE_SHARE_MIN = 0.5  # the share of matrix parameters that must lie in close tensors for `derived`
CHUNK_ELEMENTS = 1 << 24  # per slice read (64 MB in fp32): bounds memory whatever the tensor's size
FARTHEST = 5  # tensors the ledger names, farthest from the base first


def copy_lineage() -> Lineage:
    return Lineage(verdict="copy", reason="the base model's tensors")


def lineage(model_dir: Path, base_dir: Path) -> Lineage:
    """The submission in `model_dir` against the base in `base_dir` (not a copy: the caller compared hashes)."""
    return judge(model_dir, base_dir, lambda: tensor_distances(model_dir, base_dir))


Measure = Callable[[], tuple[list[TensorDistance], dict[str, tuple[int, int]], int]]


def judge(model_dir: Path, base_dir: Path, measure: Measure, started: float | None = None) -> Lineage:
    """The verdict: architecture and tokenizer first, then `measure()`'s per-tensor distances (every element:
    tensor_distances; a sample taken while hashing: grading/onepass.py), bytes read counted by `measure`."""
    t0 = time.monotonic() if started is None else started
    model_dir, base_dir = Path(model_dir), Path(base_dir)
    if (why := architecture_difference(model_dir, base_dir)) is not None:
        return Lineage(verdict="foreign", reason=why, seconds=time.monotonic() - t0)
    tok = tokenizer_match(model_dir, base_dir)
    if tok == "different":
        return Lineage(
            verdict="foreign",
            reason="its tokenizer differs from the base model's",
            tokenizer=tok,
            seconds=time.monotonic() - t0,
        )
    distances, sizes, nbytes = measure()
    matrices = [d for d in distances if sizes[d.name][1] >= 2]
    if not matrices:
        return Lineage(verdict="foreign", reason="it has no weight matrices to compare", tokenizer=tok)
    total = sum(sizes[d.name][0] for d in matrices)
    close = sum(sizes[d.name][0] for d in matrices if d.cosine >= COSINE_MIN) / total
    derived = close >= CLOSE_SHARE_MIN
    share = f"{close:.0%} of its matrix parameters"
    return Lineage(
        verdict="derived" if derived else "foreign",
        reason=f"{share} lie in tensors with cosine >= {COSINE_MIN:g} to the base"
        if derived
        else f"only {share} lie in tensors with cosine >= {COSINE_MIN:g} to the base (an unrelated model's are ~0)",
        tokenizer=tok,
        tensors=len(distances),
        close_share=close,
        cosine_min=min(d.cosine for d in matrices),
        cosine_median=statistics.median(d.cosine for d in matrices),
        rel_l2_median=statistics.median(rels)
        if (rels := [d.rel_l2 for d in matrices if d.rel_l2 is not None])
        else None,
        rel_l2_max=max(rels, default=None),
        cosine_threshold=COSINE_MIN,
        farthest=sorted(matrices, key=lambda d: d.cosine)[:FARTHEST],
        gigabytes=nbytes / GB,
        seconds=time.monotonic() - t0,
    )


def architecture_difference(model_dir: Path, base_dir: Path) -> str | None:
    """Why the two cannot be one architecture (config's model_type/architectures, tensor names and shapes), or None."""
    configs = []
    for d in (model_dir, base_dir):
        try:
            config = json.loads((d / "config.json").read_text())
        except (OSError, ValueError) as e:
            raise ValueError(f"{d / 'config.json'}: {e}") from None
        configs.append(config if isinstance(config, dict) else {})
    arch = [{k: c.get(k) for k in ("model_type", "architectures")} for c in configs]
    if arch[0] != arch[1]:
        return f"its architecture {arch[0]} is not the base model's {arch[1]}"
    mine, base = safetensors_index(model_dir), safetensors_index(base_dir)
    if missing := sorted(base.keys() - mine.keys()):
        return f"it lacks {len(missing)} of the base model's tensors (first: {missing[0]})"
    # a state dict saved by hand stores the tied output head a tied base leaves out; it is the embeddings again
    tied = {"lm_head.weight"} if configs[1].get("tie_word_embeddings") else set()
    if extra := sorted(mine.keys() - base.keys() - tied):
        return f"it has {len(extra)} tensors the base model has not (first: {extra[0]})"
    for name in sorted(base):
        if mine[name][2]["shape"] != base[name][2]["shape"]:
            return f"tensor {name} has shape {mine[name][2]['shape']}, the base's {base[name][2]['shape']}"
    return None


def tokenizer_match(model_dir: Path, base_dir: Path) -> Literal["base", "identical", "same vocabulary", "different"]:
    """How the tokenizer the grader would load for this submission compares with the base's."""
    from a2rl.llm.inference import TOKENIZER_FILES, tokenizer_source

    if tokenizer_source(model_dir, base_dir) != model_dir:
        return "base"
    present = [f for f in TOKENIZER_FILES if (model_dir / f).is_file() or (base_dir / f).is_file()]
    if all(_read(model_dir / f) == _read(base_dir / f) for f in present):
        return "identical"
    mine, base = vocabulary(model_dir), vocabulary(base_dir)
    return "same vocabulary" if mine is not None and mine == base else "different"


def _read(path: Path) -> bytes | None:
    return path.read_bytes() if path.is_file() else None


def vocabulary(model_dir: Path) -> dict[str, int] | None:
    """Token -> id, added tokens included, from tokenizer.json (else vocab.json); None when neither reads."""
    try:
        if (model_dir / "tokenizer.json").is_file():
            from tokenizers import Tokenizer

            return Tokenizer.from_file(str(model_dir / "tokenizer.json")).get_vocab(with_added_tokens=True)
        vocab = json.loads((model_dir / "vocab.json").read_text())
        return vocab if isinstance(vocab, dict) else None
    except Exception:  # an unreadable tokenizer is no vocabulary; the verdict says different
        return None


def tensor_distances(model_dir: Path, base_dir: Path) -> tuple[list[TensorDistance], dict[str, tuple[int, int]], int]:
    """Per tensor: cosine and relative L2 to the base; name -> (elements, dimensions); bytes read. Streams each
    tensor in slices of at most CHUNK_ELEMENTS along its first dimension, in float32 whatever its stored dtype."""
    import torch
    from safetensors import safe_open

    mine, base = safetensors_index(model_dir), safetensors_index(base_dir)
    distances, sizes, nbytes = [], {}, 0
    handles: dict[Path, object] = {}

    def opened(f: Path):
        if f not in handles:
            handles[f] = safe_open(str(f), framework="pt")
        return handles[f]

    for name in sorted(base):
        shape = base[name][2]["shape"]
        elements = 1
        for n in shape:
            elements *= n
        sizes[name] = (elements, len(shape))
        s_slice, b_slice = opened(mine[name][0]).get_slice(name), opened(base[name][0]).get_slice(name)
        rows = shape[0] if shape else 1
        step = max(1, CHUNK_ELEMENTS // max(1, elements // max(1, rows)))
        dot = ss = bb = dd = 0.0
        for start in range(0, rows, step):
            if shape:
                s, b = s_slice[start : start + step], b_slice[start : start + step]
            else:  # a scalar
                s, b = opened(mine[name][0]).get_tensor(name), opened(base[name][0]).get_tensor(name)
            nbytes += s.numel() * s.element_size() + b.numel() * b.element_size()
            s, b = s.reshape(-1).to(torch.float32), b.reshape(-1).to(torch.float32)
            d = s - b
            dot += float(torch.dot(s, b))
            ss += float(torch.dot(s, s))
            bb += float(torch.dot(b, b))
            dd += float(torch.dot(d, d))
        distances.append(TensorDistance(name=name, cosine=cosine(dot, ss, bb), rel_l2=rel_l2(dd, bb)))
    return distances, sizes, nbytes


def cosine(dot: float, ss: float, bb: float) -> float:
    if ss == 0.0 or bb == 0.0:
        return 1.0 if ss == bb else 0.0
    return dot / (ss**0.5 * bb**0.5)


def rel_l2(dd: float, bb: float) -> float | None:
    return (dd / bb) ** 0.5 if bb else (0.0 if dd == 0.0 else None)
