"""The directories a2rl writes outside a sweep directory (workspaces on scratch, task data, built models), and
the one-line error (RootError) when one cannot be created or written: it names the setting that moves it."""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import socket
import stat
import tempfile
from pathlib import Path
from typing import Iterator

from a2rl.errors import RootError

SCRATCH_FIX = "set scratch_root in the sweep (or its cluster profile) or the variable A2RL_SCRATCH"
DATA_FIX = "set data_root in the sweep (`a2rl prepare --data-root`) or the variable A2RL_CACHE (data goes in its data/)"
CACHE_FIX = "set the variable A2RL_CACHE (default ~/.cache/a2rl)"


def _user() -> str:
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:  # a uid without a passwd entry (some containers)
        return str(os.getuid())


def default_scratch() -> Path:
    """Per user, so that users of one machine never share it: <tmp>/a2rl-scratch-USER (<tmp>: $TMPDIR, else /tmp)."""
    return Path(tempfile.gettempdir()) / f"a2rl-scratch-{_user()}"


def expand_root(root: str, what: str, fix: str) -> Path:
    """A root as a job names it (`$TMPDIR/a2rl`, `/scratch/$USER`), expanded where it is used: an unset TMPDIR
    means the system's temporary directory, as for every program (the launcher's own set-up, off the nodes);
    another unset variable is a RootError, never a directory named after it."""
    unset: list[str] = []

    def value(m: re.Match) -> str:
        name = m.group(1) or m.group(2)
        if name in os.environ:
            return os.environ[name]
        if name == "TMPDIR":
            return tempfile.gettempdir()
        unset.append(name)
        return m.group(0)

    path = re.sub(r"\$(?:(\w+)|\{(\w+)\})", value, root)
    if unset:
        raise RootError(f"{what} {root}: ${unset[0]} is not set on {socket.gethostname()}; {fix}")
    return Path(path).expanduser()


def usable_dir(path: Path, what: str, fix: str) -> Path:
    """`path`, created if missing; a RootError if it cannot be created or this user cannot write it."""
    with guarded(path, what, fix):
        path.mkdir(parents=True, exist_ok=True)
    if not os.access(path, os.W_OK | os.X_OK):
        raise RootError(f"{what} {path} is not writable by {_user()}; {fix}")
    return path


def private_dir(path: Path, what: str, fix: str) -> Path:
    """`path` as a directory only this user can use: created 0700 if missing; an existing one must be this user's
    own, not a link, and writable by no one else (in a shared /tmp, another user may have made it first)."""
    with guarded(path, what, fix):
        try:
            path.mkdir(mode=0o700, parents=True)
        except FileExistsError:
            pass
        st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise RootError(f"{what} {path} exists and is not a directory; {fix}")
    if st.st_uid != os.getuid():
        try:
            owner = pwd.getpwuid(st.st_uid).pw_name
        except KeyError:
            owner = f"uid {st.st_uid}"
        raise RootError(f"{what} {path} belongs to another user ({owner}); {fix}")
    if st.st_mode & 0o022:
        raise RootError(
            f"{what} {path} is writable by other users (mode {stat.S_IMODE(st.st_mode):o}; chmod 700 it); {fix}"
        )
    return path


@contextlib.contextmanager
def guarded(root: Path, what: str, fix: str) -> Iterator[None]:
    """An OSError about a path under `root` (permission denied, read-only file system...) becomes a RootError."""
    try:
        yield
    except OSError as e:
        name = e.filename or ""
        if name and (str(name) == str(root) or str(name).startswith(str(root).rstrip("/") + "/")):
            raise RootError(f"{what} {root} cannot be used ({e.strerror or e}: {name}); {fix}") from None
        raise
