"""recording/nofollow.py's pieces, one by one (the survivors of tools/mutation.sh): file types in words, path
components that are refused, reads and copies in several chunks, and read_head's refusals."""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path

import pytest

from a2rl.recording import nofollow


def test_each_file_type_is_named(tmp_path):
    (tmp_path / "f").write_text("x")
    (tmp_path / "d").mkdir()
    (tmp_path / "l").symlink_to(tmp_path / "f")
    os.mkfifo(tmp_path / "p")
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(tmp_path / "s"))
        named = {n: nofollow.kind(os.lstat(tmp_path / n).st_mode) for n in "fdlps"}
    assert named == {"f": "regular file", "d": "directory", "l": "symlink", "p": "fifo", "s": "socket"}
    assert nofollow.kind(os.stat("/dev/null").st_mode) == "device"
    assert nofollow.kind(0) == "special file"


@pytest.mark.parametrize("part", ["", ".", "..", "a/b"])
def test_a_component_that_is_not_a_plain_name_is_refused(tmp_path, part):
    (tmp_path / "a" / "b").mkdir(parents=True)
    at = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(nofollow.Changed) as e:
            os.close(nofollow.open_dir(["a", part], at))
    finally:
        os.close(at)
    assert (e.value.errno, e.value.strerror) == (errno.EINVAL, f"{part!r} is not a plain path component")


@pytest.mark.parametrize("make", ["symlink", "file"])
def test_a_component_that_is_a_symlink_or_a_file_is_refused(tmp_path, make):
    (tmp_path / "real").mkdir()
    if make == "symlink":
        (tmp_path / "x").symlink_to(tmp_path / "real")
    else:
        (tmp_path / "x").write_text("x")
    at = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(nofollow.Changed) as e:
            os.close(nofollow.open_dir(["x"], at))
        with pytest.raises(FileNotFoundError):  # anything else is the OSError it is
            nofollow.open_dir(["gone"], at)
    finally:
        os.close(at)
    assert e.value.errno in (errno.ELOOP, errno.ENOTDIR) and e.value.strerror == "x is a symlink or not a directory"


def test_reads_and_copies_in_several_chunks_are_exact(tmp_path, monkeypatch):
    data = bytes(range(256)) * 4
    (tmp_path / "src").write_bytes(data)
    monkeypatch.setattr(nofollow, "CHUNK", 100)
    real_sendfile = os.sendfile
    monkeypatch.setattr(os, "sendfile", lambda o, i, off, n: real_sendfile(o, i, off, min(n, 100)))
    with open(tmp_path / "src", "rb") as f:
        assert nofollow.read_capped(f.fileno(), len(data)) == data
        assert nofollow.read_capped(f.fileno(), len(data) - 1) is None  # one byte over
        assert nofollow.read_capped(f.fileno(), 10_000) == data
        with open(tmp_path / "dst", "wb") as d:
            nofollow.copy_exact(f.fileno(), d.fileno(), len(data))
    assert (tmp_path / "dst").read_bytes() == data


def test_read_head_reads_a_regular_file_only(tmp_path):
    code = tmp_path / "ws" / "code"
    (code / "sub").mkdir(parents=True)
    (code / "sub" / "a.py").write_text("print('hello')\n")
    (tmp_path / "secret").write_text("outside")
    (code / "link").symlink_to(tmp_path / "secret")
    (code / "linkdir").symlink_to(code / "sub")
    assert nofollow.read_head(code, Path("sub/a.py"), 5) == b"print"
    assert nofollow.read_head(code, Path("sub/a.py"), 100) == b"print('hello')\n"
    assert nofollow.read_head(code, Path("link"), 100) is None
    assert nofollow.read_head(code, Path("linkdir/a.py"), 100) is None
    assert nofollow.read_head(code, Path("sub/gone.py"), 100) is None
    assert nofollow.read_head(code, Path("sub"), 100) is None
    assert nofollow.read_head(tmp_path / "ws" / "nothing", Path("a.py"), 100) is None


def test_open_regular_refuses_what_is_not_a_regular_file_before_and_after_opening(tmp_path, monkeypatch):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "to-fifo").symlink_to(tmp_path / "fifo")
    (tmp_path / "d").mkdir()
    d = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        refused = {}
        for name in ("fifo", "to-fifo", "d"):  # by lstat: never opened (a FIFO's open could block)
            with pytest.raises(nofollow.Changed) as e:
                nofollow.open_regular(name, d)
            refused[name] = (e.value.errno, e.value.strerror)
        assert refused == {
            n: (errno.EINVAL, k) for n, k in [("fifo", "fifo"), ("to-fifo", "symlink"), ("d", "directory")]
        }
        # a FIFO swapped in after lstat saw a regular file: opened (O_NONBLOCK: it cannot block), then refused by fstat
        (tmp_path / "f").write_text("x")
        real_stat = os.stat

        def stat(path, *args, **kwargs):
            st = real_stat(path, *args, **kwargs)
            if path == "f" and kwargs.get("dir_fd") is not None:
                os.mkfifo(tmp_path / ".f")
                os.rename(tmp_path / ".f", tmp_path / "f")
            return st

        monkeypatch.setattr(os, "stat", stat)
        with pytest.raises(nofollow.Changed) as e:
            nofollow.open_regular("f", d)
        monkeypatch.undo()
        assert (e.value.errno, e.value.strerror) == (errno.EINVAL, "fifo")
    finally:
        os.close(d)


def test_walk_visits_files_before_subdirectories_within_its_limits(tmp_path):
    for rel in ("a", "b", "skipme", "d1/c", "d1/d2/e", "d1/d2/d3/f"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(rel)
    root = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:

        def walked(**limits) -> list[tuple[str, str, bool, object]]:
            return [
                (rel, name, fd == -1, why if fd == -1 else why.st_size)
                for rel, name, fd, why in nofollow.walk(root, skip=lambda rel, name: name == "skipme", **limits)
            ]

        deeper = ("d1/d2/d3", "d3", True, "deeper than 2 directories")
        assert walked(max_depth=2) == [
            ("a", "a", False, 1),
            ("b", "b", False, 1),
            ("d1/c", "c", False, 4),
            ("d1/d2/e", "e", False, 7),
            deeper,
        ]
        assert walked(max_depth=3)[-1] == ("d1/d2/d3/f", "f", False, 10)
        over = ("d1/d2", "d2", True, "over 4 entries: the rest of the tree was not visited")
        assert walked(max_entries=4) == [("a", "a", False, 1), ("b", "b", False, 1), ("d1/c", "c", False, 4), over]
        # the 7th entry (d2 holds d3, then e): over, though d3 itself was only counted
        assert walked(max_entries=6)[3:] == [
            ("d1/d2/e", "e", True, "over 6 entries: the rest of the tree was not visited")
        ]
    finally:
        os.close(root)
