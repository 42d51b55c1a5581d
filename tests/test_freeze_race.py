"""The freeze's race defence, driven deterministically: the agent's move is made by a hook at the exact point
between the check and the use (test_hostile_files.py races a live attacker, in the slow layer).

- a regular file swapped for a symlink out of the tree after lstat checked it and before it is opened: the open
  (O_NOFOLLOW) refuses the link, so nothing outside the tree is opened, checked or frozen;
- a file that grows or shrinks after it was checked: the freeze copies exactly the checked size or refuses it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from a2rl.recording import nofollow
from a2rl.run.artifacts import ArtifactError, Limits, check_artifact, freeze
from test_hostile_files import HIDDEN, safetensors

LIMITS = Limits(max_files=16, max_file_bytes=1 << 20, max_total_bytes=1 << 22)
# the freeze as it runs in a run's job (with the sweep's key: the one read of run/onecopy.py) and without it
KEYS = pytest.mark.parametrize("key", [b"k" * 32, None], ids=["one read", "sendfile"])
MINE = safetensors(b"agent-own-weights-")


@pytest.fixture
def submission(tmp_path) -> tuple[Path, Path, Path]:
    """output/m (a valid model of the agent's own), and a model outside its tree."""
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    (hidden / "model.safetensors").write_bytes(safetensors(HIDDEN))
    (hidden / "config.json").write_text(json.dumps({"model_type": "llama", "who": HIDDEN.decode()}))
    output = tmp_path / "ws" / "output"
    m = output / "m"
    m.mkdir(parents=True)
    (m / "model.safetensors").write_bytes(MINE)
    (m / "config.json").write_text(json.dumps({"model_type": "llama"}))
    return output, m, hidden


def swap_after_lstat(monkeypatch, directory: Path, name: str, target: Path) -> list[str]:
    """Once the lstat of `name` (by directory descriptor, as nofollow does it) has returned, `name` becomes a
    symlink to `target` (by rename: atomic), before anything opens it. The list says when it happened."""
    real_stat, fired = os.stat, []

    def stat(path, *args, **kwargs):
        st = real_stat(path, *args, **kwargs)
        if path == name and kwargs.get("dir_fd") is not None and not fired:
            fired.append(name)
            os.symlink(target, directory / f".{name}.link")
            os.rename(directory / f".{name}.link", directory / name)
        return st

    monkeypatch.setattr(os, "stat", stat)
    return fired


def test_a_symlink_swapped_in_between_lstat_and_open_is_not_opened(tmp_path, monkeypatch):
    (tmp_path / "mine").write_bytes(b"mine")
    (tmp_path / "secret").write_bytes(HIDDEN)
    fired = swap_after_lstat(monkeypatch, tmp_path, "mine", tmp_path / "secret")
    d = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(nofollow.Changed) as e:
            fd, _ = nofollow.open_regular("mine", d)
            os.close(fd)  # only reached when the link was followed
    finally:
        os.close(d)
    assert fired == ["mine"] and e.value.strerror == "symlink"


@KEYS
@pytest.mark.parametrize("name", ["model.safetensors", "config.json"])
def test_a_symlink_out_of_the_tree_swapped_in_after_the_check_is_refused(submission, tmp_path, monkeypatch, name, key):
    output, m, hidden = submission
    fired = swap_after_lstat(monkeypatch, m, name, hidden / name)
    with pytest.raises(ArtifactError, match=f"{name} is a symlink to .*hidden.*outside the output directory"):
        with check_artifact(m, output, LIMITS) as artifact:
            freeze(artifact, tmp_path / "submissions" / "s1", key)
    assert fired == [name]
    assert not (tmp_path / "submissions").exists()


@KEYS
def test_a_file_that_grows_after_the_check_is_refused_not_frozen_past_its_size(submission, tmp_path, key):
    output, m, _ = submission
    with check_artifact(m, output, LIMITS) as artifact:
        checked = artifact.sizes["config.json"]
        with open(m / "config.json", "a") as f:  # the same file (inode), still valid JSON: only its size tells
            f.write(" " * 100)
        with pytest.raises(ArtifactError, match=f"config.json grew past {checked} bytes while it was copied"):
            freeze(artifact, tmp_path / "submissions" / "s1", key)
    assert not (tmp_path / "submissions" / "s1").exists()
    assert not (tmp_path / "submissions" / "s1.partial").exists()


@KEYS
def test_a_file_that_shrinks_after_the_check_is_refused(submission, tmp_path, key):
    output, m, _ = submission
    with check_artifact(m, output, LIMITS) as artifact:
        os.truncate(m / "model.safetensors", 10)
        with pytest.raises(ArtifactError, match=f"model.safetensors shrank from {len(MINE)} bytes"):
            freeze(artifact, tmp_path / "submissions" / "s1", key)
    assert not (tmp_path / "submissions" / "s1").exists()


def test_the_copy_holds_exactly_the_checked_size_when_the_file_grows_during_it(tmp_path, monkeypatch):
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.write_bytes(b"a" * 1000)
    real_sendfile, calls = os.sendfile, []

    def sendfile(out_fd, in_fd, offset, count):
        calls.append((offset, count))
        with open(src, "ab") as f:  # the agent appends while the copy runs
            f.write(b"b" * 5000)
        return real_sendfile(out_fd, in_fd, offset, count)

    monkeypatch.setattr(os, "sendfile", sendfile)
    with open(src, "rb") as s, open(dst, "wb") as d:
        with pytest.raises(nofollow.Changed, match="grew past 1000 bytes"):
            nofollow.copy_exact(s.fileno(), d.fileno(), 1000)
    assert calls and all(offset + count <= 1000 for offset, count in calls)
    assert dst.read_bytes() == b"a" * 1000


def test_an_unchanged_file_is_copied_exactly(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.write_bytes(bytes(range(256)) * 40)
    with open(src, "rb") as s, open(dst, "wb") as d:
        nofollow.copy_exact(s.fileno(), d.fileno(), 256 * 40)
    assert dst.read_bytes() == src.read_bytes()
