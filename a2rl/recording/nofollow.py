"""Reading a tree the agent can change while it is read (its workspace), without a race.

Every path is walked one component at a time from a directory descriptor (openat with O_NOFOLLOW), so a
component swapped for a symlink is refused, never followed; a file is opened once (O_NOFOLLOW|O_NONBLOCK, and
only after lstat said it is a regular file: FIFOs, sockets and devices are never opened), its type and size
are taken from that descriptor, and it is read from that descriptor, never past its cap. Whatever the agent
swaps in meanwhile, what is read is a file that lay inside the tree when it was opened: no byte the agent
could not read itself. Names are handled as the file system gives them (str with surrogateescape), so a name
that is not UTF-8 is read like any other; `shown` and `raw_name` say it in records.
"""

from __future__ import annotations

import errno
import os
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterable, Iterator

from a2rl.units import GIB

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
CHUNK = 1 << 20


class Changed(OSError):
    """What was opened is not what was checked (a symlink or another type swapped in), or a file changed size
    while it was copied."""


def kind(mode: int) -> str:
    """A file type in words, for skip reasons."""
    for test, name in (
        (stat.S_ISREG, "regular file"),
        (stat.S_ISDIR, "directory"),
        (stat.S_ISLNK, "symlink"),
        (stat.S_ISFIFO, "fifo"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISCHR, "device"),
        (stat.S_ISBLK, "device"),
    ):
        if test(mode):
            return name
    return "special file"


def shown(name: str) -> str:
    """A file name as text for records and messages: bytes that are not UTF-8 as \\xNN."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def raw_name(name: str) -> str | None:
    """The name's bytes in hex when they are not UTF-8 (so `shown` lost nothing); None for a UTF-8 name."""
    raw = name.encode("utf-8", "surrogateescape")
    try:
        raw.decode("utf-8")
        return None
    except UnicodeDecodeError:
        return raw.hex()


def open_dir(parts: Iterable[str], at: int) -> int:
    """The directory `parts` names under the directory descriptor `at`, each component opened without
    following a symlink (Changed if one is a symlink or not a directory). The caller closes it."""
    fd = os.dup(at)
    try:
        for part in parts:
            if part in ("", ".", "..") or "/" in part:
                raise Changed(errno.EINVAL, f"{shown(part)!r} is not a plain path component")
            try:
                nxt = os.open(part, DIR_FLAGS, dir_fd=fd)
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise Changed(e.errno, f"{shown(part)} is a symlink or not a directory") from None
                raise
            os.close(fd)
            fd = nxt
        return fd
    except BaseException:
        os.close(fd)
        raise


def open_last(path: Path) -> int:
    """A descriptor of the directory `path` (code/, output/), whose parent is the job's (the workspace) and
    whose last component the agent may have replaced: that one is opened without following a link."""
    parent = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return open_dir([path.name], parent)
    finally:
        os.close(parent)


@contextmanager
def opened_dir(parts: Iterable[str], at: int) -> Iterator[int]:
    fd = open_dir(parts, at)
    try:
        yield fd
    finally:
        os.close(fd)


def open_regular(name: str, dir_fd: int) -> tuple[int, os.stat_result]:
    """A regular file in the directory `dir_fd`, opened once, and its fstat. Checked by lstat before opening,
    so a FIFO, socket or device is never opened (Changed says what it is), and by fstat after, so a file swapped
    in between is refused too."""
    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if not stat.S_ISREG(st.st_mode):
        raise Changed(errno.EINVAL, kind(st.st_mode))
    try:
        fd = os.open(name, FILE_FLAGS, dir_fd=dir_fd)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise Changed(e.errno, "symlink") from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise Changed(errno.EINVAL, kind(st.st_mode))
    return fd, st


def read_head(root: Path, rel: Path, cap: int) -> bytes | None:
    """The first `cap` bytes of the regular file `rel` under `root` (a directory like code/, see open_last),
    every component opened without following a link; None when it is not a regular file or is gone."""
    try:
        top = open_last(root)
    except OSError:
        return None
    try:
        with opened_dir(rel.parent.parts, top) as d:
            fd, _ = open_regular(rel.name, d)
    except OSError:
        return None
    finally:
        os.close(top)
    try:
        return os.pread(fd, cap, 0)
    finally:
        os.close(fd)


def read_capped(fd: int, cap: int) -> bytes | None:
    """The file's content from offset 0, or None when it holds more than `cap` bytes (at most cap+1 are read,
    whatever its size says now)."""
    chunks, n = [], 0
    while n <= cap:
        chunk = os.pread(fd, min(CHUNK, cap + 1 - n), n)
        if not chunk:
            break
        chunks.append(chunk)
        n += len(chunk)
    return None if n > cap else b"".join(chunks)


def copy_exact(src: int, dst: int, size: int) -> None:
    """Copy exactly `size` bytes (the size checked on `src`) from offset 0; Changed if the file now holds fewer
    or more, so a copy never holds bytes past a checked size."""
    done = 0
    while done < size:
        n = os.sendfile(dst, src, done, min(size - done, GIB))
        if n == 0:
            raise Changed(errno.EIO, f"shrank from {size} bytes while it was copied")
        done += n
    if os.pread(src, 1, size):
        raise Changed(errno.EIO, f"grew past {size} bytes while it was copied")


def walk(
    root_fd: int, *, skip: Callable[[str, str], bool], max_depth: int = 64, max_entries: int = 100_000
) -> Iterator[tuple[str, str, int, os.stat_result | str]]:
    """Every non-directory entry under the directory descriptor `root_fd` (a directory's own, by name, before
    its subdirectories') as (relative path, name, its directory's descriptor, lstat result), or, for what
    cannot be visited, (path, name, -1, why). Directories are opened without following links; `skip(rel,
    name)` prunes entries; at most `max_depth` levels and `max_entries` entries. The descriptor is valid until
    the next item."""
    seen = 0

    def visit(fd: int, prefix: str, depth: int) -> Iterator[tuple[str, str, int, os.stat_result | str]]:
        nonlocal seen
        dirs = []
        for name in sorted(os.listdir(fd)):
            rel = prefix + name
            if skip(rel, name):
                continue
            seen += 1
            if seen > max_entries:
                yield rel, name, -1, f"over {max_entries} entries: the rest of the tree was not visited"
                return
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError as e:
                yield rel, name, -1, f"unreadable ({e.strerror})"
                continue
            if stat.S_ISDIR(st.st_mode):
                dirs.append(name)
            else:
                yield rel, name, fd, st
        for name in dirs:  # a directory's files before its subdirectories' (os.walk's order)
            rel = prefix + name
            if depth >= max_depth:
                yield rel, name, -1, f"deeper than {max_depth} directories"
                continue
            try:
                sub = open_dir([name], fd)
            except OSError as e:
                yield rel, name, -1, f"unreadable ({e.strerror})"
                continue
            try:
                yield from visit(sub, rel + "/", depth + 1)
            finally:
                os.close(sub)
            if seen > max_entries:
                return

    yield from visit(root_fd, "", 0)
