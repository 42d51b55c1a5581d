"""A frozen submission's content hash and lineage statistics from one streamed read of its weights.

weights.weights_hash reads every tensor's bytes once; lineage.tensor_distances read them again, and the base
model's too, converting both to float32 (~20 s per GB here). Here the bytes read for the hash also feed lineage:
each tensor's bytes go into the same SHA-256 (same order, same framing: the same digest as weights_hash), and a
fixed, deterministic sample of its elements (every (n // SAMPLE)-th element from the first, SAMPLE of them; a
tensor of at most SAMPLE elements in full) is compared with the same elements of the base. The base's samples are
its *profile*, read once per sweep (base_profile) and cached beside the baselines (grading/profiles.py), so a
submission costs one read of its own bytes, never the base's.

The sample's cosine estimates the tensor's: for an unrelated tensor its spread is 1/sqrt(SAMPLE) = 0.003, against
the verdict's threshold of 0.1. The tiny model's tensors (at most 131,072 elements) are compared in full, so its
verdicts and figures are the full comparison's.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from a2rl.grading.lineage import cosine, judge, rel_l2, tensor_distances
from a2rl.store.ledger import Lineage, TensorDistance
from a2rl.weights import safetensors_index

SAMPLE = 1 << 17  # elements compared per tensor: the tiny model's largest tensor, 512 KB of float32
BLOCK = 1 << 22  # bytes per read (a multiple of every element size)
PROFILE_VERSION = 1


# safetensors dtype -> (numpy dtype of its bytes, element size); bf16 read as uint16 and widened by hand
NUMPY_DTYPES = {
    "BF16": ("<u2", 2),
    "F16": ("<f2", 2),
    "F32": ("<f4", 4),
    "F64": ("<f8", 8),
    "I8": ("i1", 1),
    "U8": ("u1", 1),
    "I16": ("<i2", 2),
    "I32": ("<i4", 4),
    "I64": ("<i8", 8),
    "BOOL": ("u1", 1),
}


def as_float32(raw: np.ndarray, dtype: str) -> np.ndarray:
    """Sampled elements (a strided view of the read buffer) as a new float32 array."""
    if dtype == "BF16":
        return (raw.astype(np.uint32) << 16).view(np.float32)
    return raw.astype(np.float32)


def sample_step(elements: int) -> int:
    return max(1, elements // SAMPLE)


@dataclass
class TensorSample:
    shape: list[int]
    values: np.ndarray  # float32: the sampled elements, in order


@dataclass
class Scanned:
    digest: str  # equal to weights.weights_hash of the same directory
    samples: dict[str, TensorSample]
    nbytes: int
    seconds: float
    unsampled: list[str]  # tensors in a dtype not sampled here (float8)


class Digester:
    """weights_hash's SHA-256 and each tensor's sample, fed the tensors' bytes in weights_hash's order (sorted
    names): `tensor` starts one, `feed` takes its bytes block by block (any block size), `done` ends it. Used by
    `stream` here and by the freeze's copy (run/onecopy.py), which feeds it the bytes it writes."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.h = hashlib.sha256()
        self.samples: dict[str, TensorSample] = {}
        self.names: list[str] = []
        self.nbytes = 0

    def tensor(self, name: str, info: dict) -> None:
        self.h.update(json.dumps([name, info["dtype"], info["shape"]]).encode())
        self.names.append(name)
        self.info = info
        self.dtype, self.size = NUMPY_DTYPES.get(info["dtype"], (None, 1))
        begin, end = info["data_offsets"]
        self.step = sample_step((end - begin) // self.size)
        self.taken: list = []
        self.got = self.pos = 0

    def feed(self, buf, n: int) -> None:
        """The tensor's next `n` bytes, at the start of `buf` (a bytearray or memoryview; not kept)."""
        view = memoryview(buf)[:n]
        self.h.update(view)
        size, step = self.size, self.step
        if self.dtype is not None and self.got < SAMPLE and n % size == 0:  # whole elements: not a truncated end
            first = self.pos // size
            k0 = -(-first // step)  # the first sampled index at or after this block's first element
            offset = k0 * step - first
            if offset < n // size:
                part = np.frombuffer(view, dtype=self.dtype, count=n // size)[offset::step][: SAMPLE - self.got]
                self.taken.append(as_float32(part, self.info["dtype"]))  # a copy: the buffer is reused
                self.got += len(self.taken[-1])
        self.pos += n

    def done(self) -> None:
        self.nbytes += self.pos
        if self.dtype is not None:
            values = np.concatenate(self.taken) if self.taken else np.zeros(0, np.float32)
            self.samples[self.names[-1]] = TensorSample(list(self.info["shape"]), values)

    def result(self) -> Scanned:
        unsampled = sorted(set(self.names) - self.samples.keys())
        return Scanned(self.h.hexdigest(), self.samples, self.nbytes, time.monotonic() - self.t0, unsampled)


def stream(model_dir: Path) -> Scanned:
    """Every tensor's bytes read once, in weights_hash's order: the digest, and each tensor's sample."""
    tensors = safetensors_index(model_dir)
    d = Digester()
    buf = bytearray(BLOCK)
    view = memoryview(buf)
    handles: dict[Path, object] = {}
    try:
        for name in sorted(tensors):
            f, data_start, info = tensors[name]
            begin, end = info["data_offsets"]
            d.tensor(name, info)
            if f not in handles:
                handles[f] = open(f, "rb", buffering=0)
            fh = handles[f]
            fh.seek(data_start + begin)
            while d.pos < end - begin:
                n = _fill(fh, view[: min(BLOCK, end - begin - d.pos)])
                if not n:
                    raise ValueError(f"{f}: truncated safetensors file")
                d.feed(buf, n)
            d.done()
    finally:
        for fh in handles.values():
            fh.close()
    return d.result()


def _fill(fh, view: memoryview) -> int:
    """Read until `view` is full or the file ends (a short read mid-tensor would misalign the sample)."""
    n = 0
    while n < len(view) and (k := fh.readinto(view[n:])):
        n += k
    return n


def distances(mine: Scanned, base: dict[str, TensorSample]) -> tuple[list[TensorDistance], dict[str, tuple[int, int]]]:
    """Per tensor of the base: cosine and relative L2 of the samples; name -> (elements, dimensions). Called
    once lineage.architecture_difference found the names and shapes equal."""
    out, sizes = [], {}
    for name in sorted(base):
        b, s = base[name], mine.samples.get(name)
        sizes[name] = (math.prod(b.shape), len(b.shape))
        sv, bv = s.values.astype(np.float64), b.values.astype(np.float64)
        d = sv - bv
        # products summed pairwise, not through BLAS: its threads contend with the grader's on a shared machine
        dot, ss, bb, dd = (float(np.sum(x * y)) for x, y in ((sv, bv), (sv, sv), (bv, bv), (d, d)))
        out.append(TensorDistance(name=name, cosine=cosine(dot, ss, bb), rel_l2=rel_l2(dd, bb)))
    return out, sizes


def one_pass_lineage(model_dir: Path, base_dir: Path, mine: Scanned, base: dict[str, TensorSample]) -> Lineage:
    """lineage.lineage's verdict, from the samples `stream` took (the copy case is the caller's, by digest). A
    tensor in a dtype not sampled here (float8) sends the comparison back to lineage.tensor_distances."""
    if mine.unsampled or len(base) != len(mine.samples.keys() & base.keys()):
        return judge(model_dir, base_dir, lambda: tensor_distances(model_dir, base_dir))
    return judge(
        model_dir, base_dir, lambda: (*distances(mine, base), mine.nbytes), started=time.monotonic() - mine.seconds
    )
