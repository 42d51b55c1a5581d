"""What the agent leaves in its workspace cannot reach past its sandbox or break the record.

An attacker process flips files and symlinks as fast as it can while the job freezes submissions and snapshots
code: no frozen copy or snapshot ever holds a byte of a file outside the agent's tree, nor more bytes than the
caps allow. A workspace full of odd things (a name that is not UTF-8, a FIFO, a socket, a symlink loop, a huge
sparse file) is snapshotted and archived without opening them, each listed as skipped with its type.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from a2rl.recording.archive import WorkspaceArchive, archive_workspace
from a2rl.recording.snapshots import blob_path, snapshot_code
from a2rl.run.artifacts import ArtifactError, Limits, check_artifact, freeze
from a2rl.spec.sweep import RecordingSettings

HIDDEN = b"HIDDEN-MODEL-BYTES"  # in every byte range of the files outside the agent's tree
CAP = 1 << 20


def safetensors(tag: bytes, pad: int = 0) -> bytes:
    """A valid safetensors file whose every tensor byte is `tag` repeated: whoever's it is shows in any slice."""
    data = (tag * (64 // len(tag) + 1))[:64]
    header = json.dumps(
        {
            "w": {"dtype": "U8", "shape": [64], "data_offsets": [0, 64]},
            "__metadata__": {"who": tag.decode(), "pad": "x" * pad},
        }
    ).encode()
    return len(header).to_bytes(8, "little") + header + data


# The attacker: swaps each target between the agent's own regular file and a symlink out of its tree (by
# rename, so each swap is atomic), and output/m itself between a directory and a symlink, until killed.
FLIPPER = r"""
import os, sys
pairs = [tuple(a.split("=", 1)) for a in sys.argv[1:]]
i = 0
while True:
    i += 1
    for target, hidden in pairs:
        d = os.path.dirname(target)
        if target.endswith("/m"):  # the submitted directory itself
            try:
                os.rename(target, d + "/.m-real")
                os.symlink(hidden, d + "/.m-link")
                os.rename(d + "/.m-link", target)
                os.unlink(target)
                os.rename(d + "/.m-real", target)
            except OSError:
                pass
            continue
        tmp = target + ".flip"
        try:
            if i % 2:
                os.symlink(hidden, tmp)
            else:
                os.link(target + ".mine", tmp)
            os.rename(tmp, target)
        except OSError:
            try:
                os.unlink(tmp)
            except OSError:
                pass
"""


@pytest.fixture
def attacker():
    procs = []

    def start(*pairs: tuple[Path, Path]) -> None:
        procs.append(subprocess.Popen([sys.executable, "-c", FLIPPER, *(f"{t}={h}" for t, h in pairs)]))

    yield start
    for p in procs:
        p.kill()
        p.wait()


def _hidden_tree(tmp_path: Path) -> Path:
    """What lies outside the agent's tree: a valid model (the race's prize), a held-out split, a file past
    every cap (sparse: it costs no disk)."""
    hidden = tmp_path / "hidden"
    (hidden / "model").mkdir(parents=True)
    (hidden / "model" / "model.safetensors").write_bytes(safetensors(HIDDEN))
    (hidden / "model" / "config.json").write_text(json.dumps({"model_type": "llama", "who": HIDDEN.decode()}))
    (hidden / "heldout.jsonl").write_bytes(HIDDEN * 100)
    with open(hidden / "huge", "wb") as f:
        f.write(HIDDEN)
        f.truncate(64 * CAP)
    return hidden


@pytest.mark.slow  # a few hundred freezes against a live attacker
@pytest.mark.parametrize("key", [b"k" * 32, None], ids=["one read", "sendfile"])  # as in a run's job, and without
def test_a_flipping_attacker_never_gets_a_hidden_byte_into_a_frozen_copy(tmp_path, attacker, key):
    hidden = _hidden_tree(tmp_path)
    output = tmp_path / "ws" / "output"
    m = output / "m"
    m.mkdir(parents=True)
    mine = safetensors(b"agent-own-weights-")
    config = json.dumps({"model_type": "llama", "pad": "x" * (8 << 20)})  # a big config widens the window
    for name, content in (("model.safetensors", mine), ("config.json", config.encode())):
        (m / f"{name}.mine").write_bytes(content)
        os.link(m / f"{name}.mine", m / name)
    # the attacker links the .mine masters back in; they are no model files, so they are never frozen
    limits = Limits(max_files=16, max_file_bytes=16 * CAP, max_total_bytes=32 * CAP)
    attacker(
        (m / "model.safetensors", hidden / "model" / "model.safetensors"),
        (m / "config.json", hidden / "huge"),
        (m, hidden / "model"),
    )
    frozen, refused = 0, 0
    for i in range(300):
        try:
            with check_artifact(m, output, limits) as artifact:
                dest = freeze(artifact, tmp_path / "submissions" / f"s{i}", key)
        except ArtifactError:
            refused += 1
            continue
        frozen += 1
        for f in dest.iterdir():
            data = f.read_bytes()
            assert HIDDEN not in data, f"{f.name} of s{i}"
            assert len(data) <= limits.max_file_bytes
        assert (dest / "model.safetensors").read_bytes() == mine
    assert frozen and refused  # the attacker won some races against the check, none against the copy


@pytest.mark.slow  # a few hundred snapshots against a live attacker
def test_a_flipping_attacker_never_gets_a_hidden_byte_into_a_snapshot_or_archive(tmp_path, attacker):
    hidden = _hidden_tree(tmp_path)
    ws = tmp_path / "ws"
    code = ws / "code"
    code.mkdir(parents=True)
    for name in ("train.py", "notes.txt"):
        (code / f"{name}.mine").write_text("print('mine')\n")
        os.link(code / f"{name}.mine", code / name)
    attacker((code / "train.py", hidden / "heldout.jsonl"), (code / "notes.txt", hidden / "huge"))
    settings = RecordingSettings(max_file_mb=1, max_total_mb=2, workspace_max_file_mb=1, workspace_max_mb=2)
    sd = tmp_path / "sd"
    for seq in range(1, 151):
        snap = snapshot_code(sd, "r", code, submission_id=f"r.{seq}", seq=seq, settings=settings)
        assert snap.total_bytes <= 2 * CAP and all(f.size <= CAP for f in snap.files)
        if seq % 10 == 0:
            archive = archive_workspace(ws, sd / "workspace", "r", settings)
            assert archive.total_bytes <= 2 * CAP
            for f in (sd / "workspace").rglob("*"):
                assert f.is_dir() or HIDDEN not in f.read_bytes()
    blobs = [p for p in (sd / "blobs").rglob("*") if p.is_file()]
    assert blobs and not [p for p in blobs if HIDDEN in p.read_bytes()]
    assert all(p.stat().st_size <= CAP for p in blobs)


def _odd_workspace(tmp_path: Path) -> tuple[Path, bytes]:
    ws = tmp_path / "ws"
    code = ws / "code"
    code.mkdir(parents=True)
    (code / "train.py").write_text("print('hi')\n")
    bad = b"caf\xe9-\xff.py"  # Latin-1, not UTF-8
    with open(os.path.join(os.fsencode(code), bad), "wb") as f:
        f.write(b"print('odd name')\n")
    os.mkfifo(code / "pipe")
    cwd = os.getcwd()
    os.chdir(code)  # a relative name: a socket's path is limited to 107 bytes
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.bind("sock")
    finally:
        os.chdir(cwd)
    (code / "loop-a").symlink_to("loop-b")
    (code / "loop-b").symlink_to("loop-a")
    (code / "sub").mkdir()
    (code / "sub" / "up").symlink_to("..", target_is_directory=True)
    with open(code / "sparse.dat", "wb") as f:
        f.truncate(1 << 40)  # 1 TiB apparent, no disk
    return ws, bad


def _in_thread(fn):
    """fn() on a thread, joined with a generous limit: a hang fails the test instead of stalling the suite."""
    out: list = []
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    t.join(300)
    assert not t.is_alive(), "hung (a FIFO or socket was opened?)"
    return out[0]


EXPECTED_SKIPS = {
    ("pipe", "fifo"),
    ("sock", "socket"),
    ("loop-a", "symlink"),
    ("loop-b", "symlink"),
    ("sub/up", "symlink"),
    ("sparse.dat", "over max_file_mb"),
}


def test_a_snapshot_of_odd_files_records_each_and_opens_none(tmp_path):
    ws, bad = _odd_workspace(tmp_path)
    settings = RecordingSettings()
    snap = _in_thread(
        lambda: snapshot_code(tmp_path / "sd", "r", ws / "code", submission_id="r.1", seq=1, settings=settings)
    )
    assert {(s.path, s.reason) for s in snap.skipped} == EXPECTED_SKIPS
    (odd,) = [f for f in snap.files if f.raw_path is not None]
    assert odd.path == "caf\\xe9-\\xff.py" and bytes.fromhex(odd.raw_path) == bad
    assert blob_path(tmp_path / "sd", odd.sha256).read_bytes() == b"print('odd name')\n"
    assert [f.path for f in snap.files if f.raw_path is None] == ["train.py"]
    assert "caf\\xe9-\\xff.py" in snap.added


def test_an_archive_of_odd_files_records_each_and_opens_none(tmp_path):
    ws, bad = _odd_workspace(tmp_path)
    dest = tmp_path / "sd" / "workspace"
    settings = RecordingSettings(workspace_max_file_mb=1)
    archive = _in_thread(lambda: archive_workspace(ws, dest, "r", settings))
    assert {(s.path, s.reason) for s in archive.skipped} == {
        (f"code/{p}", r.replace("max_file_mb", "workspace_max_file_mb")) for p, r in EXPECTED_SKIPS
    }
    assert os.path.exists(os.path.join(os.fsencode(dest / "code"), bad))
    kept = WorkspaceArchive.load(dest / "manifest.json")
    assert (kept.files, kept.skipped) == (archive.files, archive.skipped)


def test_a_code_dir_swapped_for_a_symlink_is_refused_not_followed(tmp_path):
    hidden = _hidden_tree(tmp_path)
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "code").symlink_to(hidden, target_is_directory=True)
    with pytest.raises(OSError):
        snapshot_code(tmp_path / "sd", "r", ws / "code", submission_id="r.1", seq=1, settings=RecordingSettings())
    assert not (tmp_path / "sd" / "blobs").exists()
