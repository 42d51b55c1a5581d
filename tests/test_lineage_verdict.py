"""Lineage's verdict from its measurements (grading/lineage.py `judge`, the architecture and tokenizer checks,
cosine and relative L2) on tiny synthetic model directories and a scripted `measure`: every figure the ledger's
Lineage records is checked exactly, without a model trained or a tensor streamed (test_lineage.py has those)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from a2rl.grading import lineage as L
from a2rl.store.ledger import TensorDistance
from fakes import FakeClock

# 64 matrix parameters (32 + 16 + 16) and a norm vector, which never votes
SHAPES = {"embed.weight": (8, 4), "layer.weight": (4, 4), "head.weight": (4, 4), "norm.weight": (4,)}


def model(d: Path, shapes=SHAPES, files: dict[str, str] | None = None, **config) -> Path:
    """A model directory: config.json, model.safetensors of zeros of `shapes`, and the tokenizer `files`."""
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"], **config}))
    save_file({n: np.zeros(s, np.float32) for n, s in shapes.items()}, str(d / "model.safetensors"))
    for name, text in (files if files is not None else {"tokenizer.json": '{"t": 1}'}).items():
        (d / name).write_text(text)
    return d


def scripted(clock: FakeClock, cosines: dict[str, float], rels: dict[str, float | None], nbytes=3_000_000, took=2.5):
    """A `measure` giving these figures for SHAPES' tensors, taking `took` seconds of the clock."""

    def measure():
        clock.sleep(took)
        distances = [TensorDistance(name=n, cosine=cosines[n], rel_l2=rels[n]) for n in SHAPES]
        return distances, {n: (int(np.prod(s)), len(s)) for n, s in SHAPES.items()}, nbytes

    return measure


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    clock = FakeClock()
    monkeypatch.setattr(L, "time", clock)
    return clock


@pytest.fixture
def pair(tmp_path) -> tuple[Path, Path]:
    return model(tmp_path / "mine"), model(tmp_path / "base")


def test_derived_at_exactly_half_the_matrix_parameters_close_with_every_figure(pair, clock, monkeypatch):
    monkeypatch.setattr(L, "FARTHEST", 2)
    cosines = {"embed.weight": L.COSINE_MIN, "layer.weight": 0.05, "head.weight": 0.02, "norm.weight": -0.9}
    rels = {"embed.weight": 0.3, "layer.weight": None, "head.weight": 0.9, "norm.weight": 5.0}
    found = L.judge(*pair, scripted(clock, cosines, rels), started=clock.monotonic() - 7)
    assert found.verdict == "derived" and found.close_share == 0.5  # 32 of 64, the threshold itself close
    assert found.reason == f"50% of its matrix parameters lie in tensors with cosine >= {L.COSINE_MIN:g} to the base"
    assert found.tokenizer == "identical" and found.tensors == 4  # every tensor compared, the norm too
    # the figures are the matrices' only: the norm's cosine -0.9 and rel_l2 5.0 do not count
    assert found.cosine_min == 0.02 and found.cosine_median == 0.05
    assert found.rel_l2_median == pytest.approx(0.6) and found.rel_l2_max == 0.9  # the None left out
    assert found.cosine_threshold == L.COSINE_MIN
    assert [d.name for d in found.farthest] == ["head.weight", "layer.weight"]  # lowest cosine first, FARTHEST
    assert found.gigabytes == 0.003 and found.seconds == 7 + 2.5
    assert found.summary() == f"derived: {found.reason} (median cosine 0.050, median relative L2 0.600)"


def test_foreign_below_half_and_its_reason(pair, clock):
    cosines = {"embed.weight": 0.0999, "layer.weight": 0.5, "head.weight": 0.05, "norm.weight": 1.0}
    found = L.judge(*pair, scripted(clock, cosines, dict.fromkeys(SHAPES, None), took=1.0))
    assert found.verdict == "foreign" and found.close_share == 0.25
    assert found.reason == (
        f"only 25% of its matrix parameters lie in tensors with cosine >= {L.COSINE_MIN:g} to the base "
        "(an unrelated model's are ~0)"
    )
    assert found.rel_l2_median is None and found.rel_l2_max is None and found.seconds == 1.0
    assert found.summary() == f"foreign: {found.reason} (median cosine 0.100)"


def test_no_matrices_is_foreign_without_figures(tmp_path, clock):
    vectors = {"norm.weight": (4,), "bias": (2,)}
    mine, base = model(tmp_path / "mine", vectors), model(tmp_path / "base", vectors)

    def measure():
        d = [TensorDistance(name=n, cosine=1.0, rel_l2=0.0) for n in vectors]
        return d, {n: (s[0], 1) for n, s in vectors.items()}, 24

    found = L.judge(mine, base, measure)
    assert (found.verdict, found.reason) == ("foreign", "it has no weight matrices to compare")
    assert found.tokenizer == "identical" and found.close_share is None and found.tensors == 0


def test_another_architecture_or_tokenizer_is_foreign_before_anything_is_measured(tmp_path, clock):
    def measure():
        raise AssertionError("measured")

    base = model(tmp_path / "base")
    other = model(tmp_path / "other", model_type="mistral")
    found = L.judge(other, base, measure, started=clock.monotonic() - 3)
    assert found.verdict == "foreign" and found.seconds == 3 and found.tokenizer is None
    assert found.reason == (
        "its architecture {'model_type': 'mistral', 'architectures': ['LlamaForCausalLM']} is not the base "
        "model's {'model_type': 'llama', 'architectures': ['LlamaForCausalLM']}"
    )
    retok = model(tmp_path / "retok", files={"tokenizer.json": '{"t": 2}'})  # not a tokenizer: no vocabulary
    found = L.judge(retok, base, measure, started=clock.monotonic() - 4)
    assert (found.verdict, found.tokenizer, found.seconds) == ("foreign", "different", 4)
    assert found.reason == "its tokenizer differs from the base model's"


def test_architecture_difference_names_what_differs(tmp_path):
    base = model(tmp_path / "base")
    assert L.architecture_difference(model(tmp_path / "same"), base) is None
    fewer = model(tmp_path / "fewer", {k: v for k, v in SHAPES.items() if k not in ("embed.weight", "head.weight")})
    assert L.architecture_difference(fewer, base) == "it lacks 2 of the base model's tensors (first: embed.weight)"
    more = model(tmp_path / "more", {**SHAPES, "z.weight": (2, 2), "a.weight": (2, 2)})
    assert L.architecture_difference(more, base) == "it has 2 tensors the base model has not (first: a.weight)"
    wider = model(tmp_path / "wider", {**SHAPES, "layer.weight": (4, 8), "head.weight": (8, 4)})
    assert L.architecture_difference(wider, base) == "tensor head.weight has shape [8, 4], the base's [4, 4]"
    # an explicit output head is the tied embeddings again only where the base ties them
    head = model(tmp_path / "head", {**SHAPES, "lm_head.weight": (8, 4)}, tie_word_embeddings=True)
    tied = model(tmp_path / "tied", tie_word_embeddings=True)
    assert L.architecture_difference(head, tied) is None
    assert L.architecture_difference(head, base) == "it has 1 tensors the base model has not (first: lm_head.weight)"
    # a config that is JSON but not an object has no architecture: two such agree, and tensors decide
    for d in (tmp_path / "same", base):
        (d / "config.json").write_text("[]")
    assert L.architecture_difference(tmp_path / "same", base) is None
    (base / "config.json").write_text("{")
    with pytest.raises(ValueError, match=f"^{base / 'config.json'}: "):
        L.architecture_difference(tmp_path / "same", base)
    (base / "config.json").unlink()
    with pytest.raises(ValueError, match=f"^{base / 'config.json'}: "):
        L.architecture_difference(tmp_path / "same", base)


def test_tokenizer_match(tmp_path):
    base = model(tmp_path / "base", files={"vocab.json": json.dumps({"a": 0, "b": 1})})
    assert L.tokenizer_match(model(tmp_path / "none", files={}), base) == "base"
    assert L.tokenizer_match(model(tmp_path / "same", files={"vocab.json": json.dumps({"a": 0, "b": 1})}), base) == (
        "identical"
    )
    resaved = model(tmp_path / "resaved", files={"vocab.json": json.dumps({"b": 1, "a": 0}, indent=2)})
    assert L.tokenizer_match(resaved, base) == "same vocabulary"
    swapped = model(tmp_path / "swapped", files={"vocab.json": json.dumps({"a": 1, "b": 0})})
    assert L.tokenizer_match(swapped, base) == "different"
    # a file only one side has is compared too (absent is not equal to present)
    extra = model(tmp_path / "extra", files={"vocab.json": json.dumps({"a": 0, "b": 1}), "tokenizer_config.json": "{}"})
    assert L.tokenizer_match(extra, base) == "same vocabulary"
    # vocabularies that do not read are no vocabulary: different, even when neither reads
    lists = model(tmp_path / "lists", files={"vocab.json": "[1]"})
    (base / "vocab.json").write_text("[1, 2]")
    assert L.vocabulary(lists) is None and L.tokenizer_match(lists, base) == "different"
    assert L.vocabulary(model(tmp_path / "broken", files={"vocab.json": "{"})) is None
    assert L.vocabulary(model(tmp_path / "dict", files={"vocab.json": '{"x": 3}'})) == {"x": 3}


def test_cosine_and_relative_l2_edges():
    assert L.cosine(3.0, 4.0, 9.0) == 0.5  # 3 / (2 * 3)
    assert L.cosine(-6.0, 4.0, 9.0) == -1.0
    assert L.cosine(0.0, 0.0, 0.0) == 1.0  # both all zeros: the same tensor
    assert L.cosine(0.0, 4.0, 0.0) == 0.0 and L.cosine(0.0, 0.0, 4.0) == 0.0
    assert L.rel_l2(4.0, 16.0) == 0.5
    assert L.rel_l2(0.0, 0.0) == 0.0 and L.rel_l2(1.0, 0.0) is None


def test_copy_lineage_says_so():
    assert L.copy_lineage() == L.Lineage(verdict="copy", reason="the base model's tensors")
    assert L.copy_lineage().summary() == "copy: the base model's tensors"


def test_a_vocabulary_holds_the_added_tokens(tmp_path):
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    tok = Tokenizer(WordLevel({"a": 0, "b": 1, "[UNK]": 2}, unk_token="[UNK]"))
    tok.add_special_tokens(["<extra>"])
    d = tmp_path / "tok"
    d.mkdir()
    tok.save(str(d / "tokenizer.json"))
    (d / "vocab.json").write_text('{"not": 0}')  # tokenizer.json comes first
    assert L.vocabulary(d) == {"a": 0, "b": 1, "[UNK]": 2, "<extra>": 3}


def test_tensor_distances_streams_slices_of_at_most_chunk_elements(tmp_path, monkeypatch):
    """Every dtype read as float32, a scalar and a vector too; a slice holds at most CHUNK_ELEMENTS (or one row,
    where a row is larger), and no more slices are read than that allows; each file opened once."""
    import safetensors

    rng = np.random.default_rng(0)
    shapes = {"m.weight": (5, 3), "v.bias": (6,), "s.scale": (), "w.weight": (2, 8)}
    base = {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}
    mine = {n: (v + rng.standard_normal(v.shape) * 0.5).astype(np.float16) for n, v in base.items()}
    base["m.weight"], mine["m.weight"] = base["m.weight"].astype(np.float16), mine["m.weight"].astype(np.float32)
    for d, tensors in (("base", base), ("mine", mine)):
        (tmp_path / d).mkdir()
        save_file({n: np.asarray(v) for n, v in tensors.items()}, str(tmp_path / d / "model.safetensors"))
    reads, opened, real = [], [], safetensors.safe_open

    class Spy:
        def __init__(self, handle):
            self.handle = handle

        def get_slice(self, name):
            whole = self.handle.get_slice(name)
            return type("Slice", (), {"__getitem__": lambda _, k: reads.append((name, k.start, k.stop)) or whole[k]})()

        def get_tensor(self, name):
            reads.append((name, None, None))
            return self.handle.get_tensor(name)

    monkeypatch.setattr(safetensors, "safe_open", lambda f, framework: opened.append(f) or Spy(real(f, framework)))
    monkeypatch.setattr(L, "CHUNK_ELEMENTS", 4)
    distances, sizes, nbytes = L.tensor_distances(tmp_path / "mine", tmp_path / "base")
    assert sorted(opened) == sorted(str(tmp_path / d / "model.safetensors") for d in ("base", "mine"))
    assert sizes == {"m.weight": (15, 2), "v.bias": (6, 1), "s.scale": (1, 0), "w.weight": (16, 2)}
    assert nbytes == 38 * 4 + 38 * 2  # 2 and 4 bytes an element (either side's dtype), each element once
    expected = {
        "m.weight": [(i, i + 1) for i in range(5)],  # rows of 3: one a slice
        "v.bias": [(0, 4), (4, 8)],
        "s.scale": [(None, None)],
        "w.weight": [(0, 1), (1, 2)],  # a row of 8 is more than 4, read alone
    }
    for name, slices in expected.items():
        assert [(a, b) for n, a, b in reads if n == name] == [s for s in slices for _ in (0, 1)], name
    for d in distances:
        s, b = mine[d.name].astype(np.float64).ravel(), base[d.name].astype(np.float64).ravel()
        assert d.cosine == pytest.approx(s @ b / np.sqrt((s @ s) * (b @ b)), abs=1e-6), d.name
        assert d.rel_l2 == pytest.approx(np.linalg.norm(s - b) / np.linalg.norm(b), rel=1e-5), d.name
    assert [d.name for d in distances] == sorted(shapes)
