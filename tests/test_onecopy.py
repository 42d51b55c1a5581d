"""The freeze's one read (run/onecopy.py, grading/frozenscan.py): the copy's own reads give the content hash, the
lineage samples and the canary search, signed beside the frozen copy; the grader takes them only when they
verify. The frozen copy is byte-identical, the hash is weights_hash's, the samples and verdicts those of a read of
the copy (grading/onepass.stream); a canary in the weights is still found; what the grader cannot trust it
reads again."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import a2rl.tasklib.leaks as leaks
from a2rl.grading import frozenscan as F
from a2rl.grading import onepass as O
from a2rl.grading import profiles as P
from a2rl.recording.frozencopies import SCAN, scan_path
from a2rl.run import onecopy
from a2rl.run.artifacts import ArtifactError, Limits, check_artifact, freeze
from a2rl.run.onecopy import Layout
from a2rl.weights import weights_hash
from test_canary import ITEM, leaky_task, run  # noqa: F401 (a fixture)
from test_lineage import other_seed_model, rewrite  # noqa: F401 (a fixture)

KEY = b"k" * 32
CANARY = "a2rl-canary-0123456789abcdef0123456789abcdef"
LIMITS = Limits(max_files=64, max_file_bytes=1 << 30, max_total_bytes=1 << 31)


def submitted(model: Path, output: Path) -> Path:
    """`model` as a directory under the agent's output/."""
    m = output / model.name
    m.mkdir(parents=True)
    for f in model.iterdir():
        (m / f.name).write_bytes(f.read_bytes())
    return m


def frozen(m: Path, dest: Path, key=KEY, canary=CANARY) -> Path:
    with check_artifact(m, m.parent, LIMITS) as artifact:
        return freeze(artifact, dest, key, canary)


def taken(dest: Path, canary=CANARY):
    return F.take_scan(dest, KEY, canary)


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of 4 KiB + 8 bytes: every tensor of more than 1,026 float32 elements spans several blocks."""
    monkeypatch.setattr(onecopy, "BLOCK", 4096 + 8)


def test_the_copy_is_byte_identical_with_todays_hash_samples_and_verdicts(
    tmp_path,
    tiny_model,
    other_seed_model,  # noqa: F811
    small_blocks,
):
    def nudge(t):
        g = torch.Generator().manual_seed(0)
        return {k: v + 0.3 * v.norm() / v.numel() ** 0.5 * torch.randn(v.shape, generator=g) for k, v in t.items()}

    moved = rewrite(tiny_model, tmp_path / "moved", nudge)
    half = rewrite(tiny_model, tmp_path / "bf16", lambda t: {k: v.bfloat16() for k, v in t.items()})
    base = P.base_profile(tiny_model).samples
    for model, verdict in ((tiny_model, "copy"), (moved, "derived"), (half, "derived"), (other_seed_model, "foreign")):
        m = submitted(model, tmp_path / "out" / model.name)
        dest = frozen(m, tmp_path / "submissions" / model.name)
        plain = frozen(m, tmp_path / "plain" / model.name, key=None)  # today's copy (sendfile)
        assert sorted(p.name for p in dest.iterdir()) == sorted(p.name for p in plain.iterdir())
        for f in plain.iterdir():
            assert (dest / f.name).read_bytes() == f.read_bytes() == (m / f.name).read_bytes(), f.name
        scan, scanned = taken(dest)
        assert scanned.digest == weights_hash(dest) == weights_hash(model)
        read = O.stream(dest)
        assert scanned.samples.keys() == read.samples.keys() and scanned.nbytes == read.nbytes
        for name, s in read.samples.items():
            assert s.shape == scanned.samples[name].shape and np.array_equal(s.values, scanned.samples[name].values)
        mine, today = (O.one_pass_lineage(dest, tiny_model, x, base) for x in (scanned, read))
        assert mine.verdict == today.verdict == (verdict if verdict != "copy" else mine.verdict)
        assert (mine.close_share, mine.cosine_median) == (today.close_share, today.cosine_median)
        assert not scan_path(dest).exists()  # taken once


@pytest.mark.parametrize("where", ["tensor", "across blocks", "across tensors", "header", "gap"])
def test_a_canary_in_the_weights_is_found_wherever_it_lies(tmp_path, small_blocks, where):
    a = np.arange(3000, dtype=np.float32).tobytes()  # 12,000 bytes: three blocks
    b = np.ones(8, dtype=np.float32).tobytes()
    gap = b"\0" * 100
    header = {
        "a": {"dtype": "F32", "shape": [3000], "data_offsets": [0, len(a)]},
        "b": {"dtype": "F32", "shape": [8], "data_offsets": [len(a) + len(gap), len(a) + len(gap) + len(b)]},
        "__metadata__": {"note": CANARY if where == "header" else "x"},
    }
    data = bytearray(a + gap + b)
    at = {"tensor": 100, "across blocks": 4096 + 8 - 10, "across tensors": len(a) - 10, "gap": len(a) + 20}
    if where in at:
        data[at[where] : at[where] + len(CANARY)] = CANARY.encode()
    head = json.dumps(header).encode()
    m = tmp_path / "out" / "m"
    m.mkdir(parents=True)
    (m / "model.safetensors").write_bytes(len(head).to_bytes(8, "little") + head + bytes(data))
    (m / "config.json").write_text("{}")
    dest = frozen(m, tmp_path / "submissions" / "s1")
    scan, scanned = taken(dest)
    assert scan.canary_in == ["model.safetensors"] and scanned.digest == weights_hash(dest)
    clean = frozen(m, tmp_path / "submissions" / "s2", canary="a2rl-canary-" + "f" * 32)
    assert taken(clean, "a2rl-canary-" + "f" * 32)[0].canary_in == []


def test_the_canary_search_finds_it_whatever_the_blocks_and_only_in_the_bytes_read():
    c = CANARY.encode()
    data = b"x" * 50 + c + b"y" * 50
    for size in (1, 3, 7, len(c) - 1, len(c), 2 * len(c) - 2, 2 * len(c) + 5, 64, len(data)):
        for start in range(0, min(size, 9)):  # the canary split at each point of a block
            finder = onecopy.Canary(c)
            finder.look("other", 0, b"z" * 10, 10)
            edges = [0, *range(start or size, len(data), size), len(data)]
            for a, b in zip(edges, edges[1:]):
                buf = bytearray(data[a:b] + c)  # a reused buffer: bytes past n are another block's
                finder.look("f", a, buf, b - a)
            assert finder.files() == ["f"], (size, start)
    for at in range(0, len(c) + 2):  # at a block's very start, or split across two reads of any length
        finder = onecopy.Canary(c)
        finder.look("f", 0, data[: 50 + at], 50 + at)
        finder.look("f", 50 + at, data[50 + at :], len(data) - 50 - at)
        assert finder.files() == ["f"], at
    for size in (1, 5, len(c) - 1):  # at the file's very first byte, in reads shorter than itself
        finder = onecopy.Canary(c)
        for a in range(0, len(data) - 50, size):
            finder.look("f", a, data[50 + a : 50 + a + size], len(data[50 + a : 50 + a + size]))
        assert finder.files() == ["f"], size
    finder = onecopy.Canary(c)
    finder.look("f", 0, c[1:] + b"-" + c, len(c))  # the bytes read hold no canary, the rest of the buffer does
    finder.look("f", len(c), b"q" * 100, 100)
    assert finder.files() == []
    assert onecopy.Canary(None).files() == [] and onecopy.Canary(c[:1]).files() == []


def test_a_canary_from_the_first_byte_after_the_header_across_tiny_tensors_is_found(tmp_path):
    """Each tensor is its own read: 8-byte tensors put the canary's bytes in six reads, the first one right
    after the header (the header's edges must sit at its true offsets for them to join)."""
    c = CANARY.encode() + b"\0" * 4  # 48 bytes: six tensors of two float32
    header = {f"t{i:02d}": {"dtype": "F32", "shape": [2], "data_offsets": [8 * i, 8 * i + 8]} for i in range(8)}
    head = json.dumps(header).encode()
    m = tmp_path / "out" / "m"
    m.mkdir(parents=True)
    (m / "model.safetensors").write_bytes(len(head).to_bytes(8, "little") + head + c + b"\1" * 16)
    (m / "config.json").write_text("{}")
    assert taken(frozen(m, tmp_path / "submissions" / "s1"))[0].canary_in == ["model.safetensors"]


def test_a_header_is_parsed_within_its_bounds_and_one_that_fills_the_file_is_a_layout(tmp_path):
    def layout(raw: bytes) -> Layout | None:
        (tmp_path / "f").write_bytes(raw)
        with open(tmp_path / "f", "rb") as f:
            return onecopy.layout(f.fileno(), len(raw))

    empty = b"{}"
    assert layout(len(empty).to_bytes(8, "little") + empty).header == {}  # a header, no tensor: nothing after it
    assert layout((1 << 62).to_bytes(8, "little") + empty) is None  # never read: past MAX_HEADER_BYTES
    meta = json.dumps({"__metadata__": {"a": "b"}}).encode()
    assert layout(len(meta).to_bytes(8, "little") + meta).header == {}

    def one(data: bytes = b"\0" * 8, **entry) -> Layout | None:
        head = json.dumps({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8], **entry}}).encode()
        return layout(len(head).to_bytes(8, "little") + head + data)

    assert one().ranges == [] and one().header["t"]["data_offsets"] == [0, 8]
    assert one(b"", shape=[0], data_offsets=[0, 0]) is not None  # an empty tensor
    for bad in [
        {"dtype": 5},
        {"shape": [2.0]},
        {"data_offsets": [0.0, 8]},
        {"data_offsets": [0, 8.0]},
        {"data_offsets": [0, 9]},  # past the file's end
        {"data_offsets": [4, 2]},
        {"data_offsets": [-1, 8]},
    ]:
        assert one(**bad) is None, bad
    padded = b"{}" + b" " * 8  # a header padded with spaces, cut short after the size was checked: never parsed
    (tmp_path / "f").write_bytes(len(padded).to_bytes(8, "little") + padded[:5])
    with open(tmp_path / "f", "rb") as f:
        assert onecopy.layout(f.fileno(), 8 + len(padded)) is None


def test_each_byte_is_read_once_and_short_writes_are_resumed(tmp_path, tiny_model, small_blocks, monkeypatch):
    m = submitted(tiny_model, tmp_path / "out" / "m")
    weights = next(m.glob("*.safetensors"))
    head = 8 + int.from_bytes(weights.read_bytes()[:8], "little")
    reads, preadv, pwrite = [], os.preadv, os.pwrite

    def read(fd, buffers, offset):
        n = preadv(fd, buffers, offset)
        if os.path.samefile(f"/proc/self/fd/{fd}", weights):
            reads.append((offset, offset + n))
        return n

    monkeypatch.setattr(os, "preadv", read)
    monkeypatch.setattr(os, "pwrite", lambda fd, data, offset: pwrite(fd, bytes(data)[:1000], offset))  # 1000 a call
    dest = frozen(m, tmp_path / "submissions" / "s1")
    for f in dest.iterdir():
        assert f.read_bytes() == (m / f.name).read_bytes(), f.name
    reads.sort()
    assert reads[0][0] == head and reads[-1][1] == weights.stat().st_size  # the header was read once, by layout
    assert all(a[1] == b[0] for a, b in zip(reads, reads[1:]))  # no byte read twice, none left out
    assert taken(dest)[1].digest == weights_hash(m)


def test_the_grader_reads_again_what_it_cannot_trust(tmp_path, tiny_model, caplog):
    m = submitted(tiny_model, tmp_path / "out" / "m")

    def renamed(d: Path) -> Path:  # the frozen copy and its scan moved together: the files as they were
        other = d.with_name(d.name + "-moved")
        d.rename(other)
        scan_path(d).rename(scan_path(other))
        return other

    cases = {
        "written after the freeze": (
            lambda d: (d / "config.json").write_text((d / "config.json").read_text()),
            "the frozen copy changed since",
        ),
        "another key": (
            lambda d: F.FrozenScan.load(scan_path(d) / "scan.json").sign(b"x" * 32).dump(scan_path(d) / "scan.json"),
            "{scan}/scan.json: FrozenScan does not verify (written without the sweep's key): ignored",
        ),
        "samples changed": (
            lambda d: next(scan_path(d).glob("*.hmac")).write_text("0" * 64),
            "its samples do not verify",
        ),
        "another canary": (lambda d: None, "the split's canary changed since"),
        "another submission": (renamed, "it names another submission"),
    }
    for i, (case, (spoil, why)) in enumerate(cases.items()):
        dest = frozen(m, tmp_path / "submissions" / f"s{i}")
        moved = spoil(dest)
        dest = moved if isinstance(moved, Path) else dest
        caplog.clear()
        assert taken(dest, CANARY if case != "another canary" else CANARY + "2") is None, case
        assert not scan_path(dest).exists()
        why = why.format(scan=scan_path(dest))
        assert [r.getMessage() for r in caplog.records if r.name == "a2rl.grader"] == [
            f"the freeze's scan of {dest.name} is not used ({why}): the frozen copy is read again"
        ], case
    plain = frozen(m, tmp_path / "submissions" / "plain", key=None)  # without the key: no scan, as before
    assert not scan_path(plain).exists() and taken(plain) is None


def test_a_scan_is_taken_as_the_freeze_wrote_it_even_without_a_canary_or_with_a_racing_grader(
    tmp_path, tiny_model, monkeypatch
):
    m = submitted(tiny_model, tmp_path / "out" / "m")
    dest = frozen(m, tmp_path / "submissions" / "s1", canary=None)  # a split without a canary
    scan, scanned = taken(dest, None)
    assert (scan.canary, scan.canary_in) == (None, [])
    assert (scanned.digest, scanned.nbytes, scanned.seconds, scanned.unsampled) == (
        weights_hash(dest),
        scan.nbytes,
        0.0,  # the grader read nothing
        scan.unsampled,
    )
    assert scanned.unsampled == [] and scanned.samples.keys() == O.stream(dest).samples.keys()
    # another grader claimed the same submission again and removed the scan while this one read it: no error
    dest = frozen(m, tmp_path / "submissions" / "s2", canary=None)
    loaded = F.load_profile
    monkeypatch.setattr(F, "load_profile", lambda d, *a: (loaded(d, *a), shutil.rmtree(d))[0])
    assert taken(dest, None)[1].digest == weights_hash(dest)


def test_overlapping_tensors_get_the_plain_copy_and_no_scan(tmp_path):
    data = np.arange(16, dtype=np.float32).tobytes()
    head = json.dumps(
        {
            "a": {"dtype": "F32", "shape": [16], "data_offsets": [0, 64]},
            "b": {"dtype": "F32", "shape": [8], "data_offsets": [32, 64]},
        }
    ).encode()
    m = tmp_path / "out" / "m"
    m.mkdir(parents=True)
    (m / "model.safetensors").write_bytes(len(head).to_bytes(8, "little") + head + data)
    (m / "config.json").write_text("{}")
    dest = frozen(m, tmp_path / "submissions" / "s1")
    assert (dest / "model.safetensors").read_bytes() == (m / "model.safetensors").read_bytes()
    assert taken(dest) is None


def test_bytes_the_agent_writes_during_the_copy_are_hashed_as_frozen(tmp_path, tiny_model, small_blocks, monkeypatch):
    m = submitted(tiny_model, tmp_path / "out" / "m")
    weights = next(m.glob("*.safetensors"))
    real, calls = os.preadv, []

    def preadv(fd, buffers, offset):
        calls.append(offset)
        if len(calls) == 5:  # the agent rewrites its weights mid-copy, same size
            with open(weights, "r+b") as f:
                f.seek(weights.stat().st_size // 2)
                f.write(os.urandom(weights.stat().st_size // 4))
        return real(fd, buffers, offset)

    monkeypatch.setattr(os, "preadv", preadv)
    dest = frozen(m, tmp_path / "submissions" / "s1")
    assert len(calls) > 5 and taken(dest)[1].digest == weights_hash(dest)


@pytest.mark.parametrize("change", ["shrank from", "grew past"])
def test_weights_that_change_size_during_the_copy_are_refused_by_name(
    tmp_path, tiny_model, small_blocks, monkeypatch, change
):
    m = submitted(tiny_model, tmp_path / "out" / "m")
    weights = next(m.glob("*.safetensors"))
    size, real, calls = weights.stat().st_size, os.preadv, []
    assert sorted(p.name for p in m.iterdir())[-1] != weights.name  # not the last file kept

    def preadv(fd, buffers, offset):
        calls.append(offset)
        if len(calls) == 3:  # the agent truncates or appends to its weights mid-copy
            os.truncate(weights, size // 2 if change == "shrank from" else size + 1)
        return real(fd, buffers, offset)

    monkeypatch.setattr(os, "preadv", preadv)
    with pytest.raises(ArtifactError) as e:
        frozen(m, tmp_path / "submissions" / "s1")
    assert str(e.value) == f"{weights.name} {change} {size} bytes while it was copied: refused"
    assert not (tmp_path / "submissions" / "s1").exists()


def test_a_canary_in_the_weights_is_caught_by_the_grader_on_the_one_read_path(run, tiny_model, monkeypatch):  # noqa: F811
    """The real submit and grader: the weights are not read again (the freeze's scan is taken), and the canary
    the agent planted in a tensor's bytes is flagged in the ledger."""
    import a2rl.grading.stages as stages

    run_dir, ws, submit, report, canary = run
    monkeypatch.setattr(leaks, "MAX_TEXT_BYTES", 1 << 20)  # the tiny model's weights count as weights
    streamed = []
    monkeypatch.setattr(stages, "stream", lambda d: streamed.append(d) or O.stream(d))
    m = submitted(tiny_model, ws.output / "leaky")
    weights = next(m.glob("*.safetensors"))
    raw = bytearray(weights.read_bytes())
    raw[len(raw) // 2 : len(raw) // 2 + len(canary)] = canary.encode()
    weights.write_bytes(bytes(raw))
    submit(m)
    metrics, _ = report()
    assert metrics.leaks == [f"submission 1: canary in {weights.name}"]
    assert streamed == []


def test_a_scan_the_grading_did_not_take_is_deleted_with_the_submission(run, tiny_model, monkeypatch):  # noqa: F811
    import a2rl.grading.stages as stages
    from a2rl.grading.trust import UntrustedArtifact

    run_dir, ws, submit, report, canary = run

    seen = []

    def refused(artifact, submissions):
        seen.append(scan_path(Path(artifact)).is_dir())  # the freeze made it
        raise UntrustedArtifact("refused before the scan was taken")

    monkeypatch.setattr(stages, "check_frozen", refused)
    submit(submitted(tiny_model, ws.output / "m"))
    assert seen == [True] and not list(run_dir.parent.parent.glob(f"submissions/*{SCAN}"))
