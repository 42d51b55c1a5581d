"""One read of a frozen submission's weights for its content hash and its lineage (a2rl/grading/onepass.py, the base's
profile in a2rl/grading/profiles.py): the same digest as weights.weights_hash, the same verdicts and (for tensors of
at most SAMPLE elements) the same figures as grading/lineage.lineage, a sample that is the tensor's own strided
elements whatever the read's block size, and a profile cache that is signed and never trusted unverified.
The slow test runs a ~1 GB Qwen2-shaped synthetic (tools/bench/bigmodel.py) through both."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from a2rl.grading import lineage as L
from a2rl.grading import onepass as O
from a2rl.grading import profiles as P
from a2rl.grading.frozenscan import take_scan
from a2rl.run.artifacts import Limits, check_artifact, freeze
from a2rl.weights import safetensors_index, weights_hash
from conftest import REPO
from test_lineage import other_seed_model, rewrite  # noqa: F401 (a fixture)

FIGURES = (
    "verdict",
    "tokenizer",
    "tensors",
    "close_share",
    "cosine_min",
    "cosine_median",
    "rel_l2_median",
    "rel_l2_max",
)


def one_pass(model: Path, base: Path):
    scanned = O.stream(model)
    return scanned, O.one_pass_lineage(model, base, scanned, P.base_profile(base).samples)


def same_figures(a, b, tol=1e-4) -> None:
    """Equal verdicts and figures; floats within `tol` (today's code sums float32 products, this float64 ones:
    cosines near 1 differ by ~1e-6, ~2e-5 where torch sums on one thread (tools/mutation.sh runs so), enough to
    reorder a near-copy's farthest tensors: their cosines are compared)."""
    for f in FIGURES:
        x, y = getattr(a, f), getattr(b, f)
        assert x == pytest.approx(y, abs=tol) if isinstance(x, float) else x == y, (f, x, y)
    assert [d.cosine for d in a.farthest] == pytest.approx([d.cosine for d in b.farthest], abs=tol)


def test_on_the_tiny_model_one_read_gives_todays_hash_verdicts_and_figures(tmp_path, tiny_model, other_seed_model):  # noqa: F811
    assert max(n for n, _ in L.tensor_distances(tiny_model, tiny_model)[1].values()) <= O.SAMPLE  # compared in full

    def nudge(t):
        g = torch.Generator().manual_seed(0)
        return {k: v + 0.3 * v.norm() / v.numel() ** 0.5 * torch.randn(v.shape, generator=g) for k, v in t.items()}

    moved = rewrite(tiny_model, tmp_path / "moved", nudge)
    half = rewrite(tiny_model, tmp_path / "bf16", lambda t: {k: v.bfloat16() for k, v in t.items()})
    for model, verdict in ((moved, "derived"), (half, "derived"), (other_seed_model, "foreign")):
        scanned, found = one_pass(model, tiny_model)
        assert scanned.digest == weights_hash(model)
        assert found.verdict == verdict
        same_figures(found, L.lineage(model, tiny_model))
    assert O.stream(tiny_model).digest == weights_hash(tiny_model)


def big_pair(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A base (fp32, two shards) with matrices past SAMPLE elements, odd sizes included, a bf16 fine-tune of it
    and an unrelated model, sharing its config and tokenizer."""
    g = torch.Generator().manual_seed(3)
    shapes = {"a.weight": (1024, 1024), "b.weight": (1000, 1037), "c.weight": (300, 7), "n.weight": (1037,)}
    base = {k: torch.randn(s, generator=g) * 0.02 for k, s in shapes.items()}
    tuned = {k: (v + 0.01 * torch.randn(v.shape, generator=g)).bfloat16() for k, v in base.items()}
    other = {k: torch.randn(s, generator=g) * 0.02 for k, s in shapes.items()}
    dirs = []
    for name, tensors, split in (("base", base, 2), ("tuned", tuned, 1), ("other", other, 3)):
        d = tmp_path / name
        d.mkdir()
        (d / "config.json").write_text('{"model_type": "llama", "architectures": ["LlamaForCausalLM"]}')
        names = sorted(tensors)
        for i in range(split):
            part = {k: tensors[k] for k in names[i::split]}
            save_file(part, d / f"model-{i:05d}.safetensors", metadata={"format": "pt"})
        dirs.append(d)
    return tuple(dirs)


def test_a_sample_is_the_tensors_strided_elements_whatever_the_block_size(tmp_path, monkeypatch):
    base, tuned, other = big_pair(tmp_path)
    whole = {k: v.float().reshape(-1).numpy() for k, v in load_file(tuned / "model-00000.safetensors").items()}
    for block in (O.BLOCK, 4096, 6 * 1024 + 8):  # the last: blocks that end mid-stride
        monkeypatch.setattr(O, "BLOCK", block)
        scanned = O.stream(tuned)
        assert scanned.digest == weights_hash(tuned) and scanned.unsampled == []
        for name, flat in whole.items():
            step = O.sample_step(flat.size)
            assert np.array_equal(scanned.samples[name].values, flat[::step][: O.SAMPLE]), (block, name)
            assert len(scanned.samples[name].values) == min(flat.size, O.SAMPLE)
    for model, verdict in ((tuned, "derived"), (other, "foreign")):
        _, found = one_pass(model, base)
        full = L.lineage(model, base)
        assert found.verdict == full.verdict == verdict
        same_figures(found, full, tol=0.02)  # sampled: within the sample's spread of the full tensors' figures


def test_a_dtype_not_sampled_falls_back_to_the_full_comparison(tmp_path, monkeypatch):
    base, tuned, _ = big_pair(tmp_path)
    monkeypatch.delitem(O.NUMPY_DTYPES, "BF16")  # as float8 is
    scanned = O.stream(tuned)
    assert scanned.digest == weights_hash(tuned) and len(scanned.unsampled) == len(safetensors_index(tuned))
    found = O.one_pass_lineage(tuned, base, scanned, P.base_profile(base).samples)
    same_figures(found, L.lineage(tuned, base))


def test_the_base_profile_is_cached_signed_and_never_trusted_unverified(tmp_path, monkeypatch):
    base, tuned, _ = big_pair(tmp_path)
    key, cache, digest = b"k" * 32, tmp_path / "profiles", weights_hash(base)
    made = P.cached_profile(cache, digest, base, key, 5)
    assert made.digest == digest and (cache / f"{digest}.safetensors").is_file()
    reads = []
    monkeypatch.setattr(P, "base_profile", lambda d: reads.append(d) or made)
    again = P.cached_profile(cache, digest, base, key, 5)
    assert reads == [] and again.samples.keys() == made.samples.keys()
    for name, s in made.samples.items():
        assert np.array_equal(again.samples[name].values, s.values) and again.samples[name].shape == s.shape
    assert P.load_profile(cache, digest, b"x" * 32) is None  # another sweep's key
    f = cache / f"{digest}.safetensors"
    raw = bytearray(f.read_bytes())
    raw[-1] ^= 1  # one sample changed: the signature no longer verifies, so the base is read again
    f.write_bytes(bytes(raw))
    P.cached_profile(cache, digest, base, key, 5)
    assert reads == [base]
    with pytest.raises(ValueError, match="changed since its baseline"):
        P.cached_profile(tmp_path / "fresh", "0" * 64, base, key, 5)


@pytest.mark.slow
def test_a_1gb_qwen2_shaped_synthetic_gets_todays_hash_and_verdicts(tmp_path):
    sys.path.insert(0, str(REPO / "tools" / "bench"))
    import bigmodel

    base = bigmodel.write_model(tmp_path / "base", 5e8, "bf16", shard_gb=0.4)
    assert sum(f.stat().st_size for f in base.glob("*.safetensors")) > 0.9e9
    assert (base / "model.safetensors.index.json").is_file() and len(list(base.glob("*.safetensors"))) == 3
    profile = P.base_profile(base)
    assert profile.digest == weights_hash(base)
    for variant, verdict in (("trained", "derived"), ("lora", "derived"), ("foreign", "foreign")):
        model = bigmodel.write_model(tmp_path / "out" / variant, 5e8, "bf16", variant, shard_gb=0.4)
        scanned = O.stream(model)
        assert scanned.digest == weights_hash(model)
        found, full = O.one_pass_lineage(model, base, scanned, profile.samples), L.lineage(model, base)
        assert found.verdict == full.verdict == verdict, (variant, found, full)
        same_figures(found, full, tol=0.01)
        # the freeze's one read (run/onecopy.py): a byte-identical copy, the same hash, samples and verdict
        with check_artifact(model, model.parent, Limits(64, 1 << 40, 1 << 40)) as artifact:
            frozen = freeze(artifact, tmp_path / "submissions" / variant, b"k" * 32, "a2rl-canary-x")
        for f in model.iterdir():
            assert (frozen / f.name).read_bytes() == f.read_bytes(), f.name
        took = take_scan(frozen, b"k" * 32, "a2rl-canary-x")[1]
        assert took.digest == scanned.digest and took.samples.keys() == scanned.samples.keys()
        assert all(np.array_equal(took.samples[n].values, s.values) for n, s in scanned.samples.items())
        assert O.one_pass_lineage(frozen, base, took, profile.samples).verdict == verdict
        shutil.rmtree(model)
        shutil.rmtree(frozen)
