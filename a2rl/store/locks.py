"""Every lock a2rl takes in a sweep directory or a data root: a real `flock`, with a timeout, or an error.

filelock 4.x falls back to a soft lock (a marker file) where `flock` fails with ENOSYS; a marker left by a holder
that died on another node is never broken, and the sweep stalls. Where the file system has no working `flock`
(ENOSYS, ENOLCK, EOPNOTSUPP) these locks raise `LocksUnsupported` instead, in one line naming the fix. A lock
held past its timeout raises `filelock.Timeout`, as before.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

from filelock import UnixFileLock

UNSUPPORTED_ERRNOS = frozenset({errno.ENOSYS, errno.ENOLCK, errno.EOPNOTSUPP})

FIX = (
    "the sweep directory needs a file system whose flock works across nodes: Lustre mounted with `flock` "
    "(not `localflock`), NFS without `nolock`/`local_lock`, BeeGFS with global file locks; or put it elsewhere "
    "(`a2rl doctor` checks a directory)"
)


class LocksUnsupported(RuntimeError):
    """The file system under a lock file has no working `flock`: a2rl refuses to run its queue on a soft lock."""

    def __init__(self, path: str | os.PathLike[str], err: OSError | None = None) -> None:
        cause = f"{errno.errorcode.get(err.errno or 0, err.errno)}: {err.strerror}" if err else "soft lock"
        super().__init__(f"locks unsupported on {Path(path).parent} ({cause}); {FIX}")
        self.path = str(path)


class SweepLock(UnixFileLock):
    """`UnixFileLock` that never degrades to a soft lock: no working flock raises `LocksUnsupported`."""

    def __init__(self, lock_file: str | os.PathLike[str], timeout: float = -1) -> None:
        super().__init__(str(lock_file), timeout=timeout, fallback_to_soft=False)

    def acquire(self, *args: Any, **kwargs: Any) -> Any:
        try:
            proxy = super().acquire(*args, **kwargs)
        except OSError as e:
            if e.errno in UNSUPPORTED_ERRNOS:
                raise LocksUnsupported(self.lock_file, e) from e
            raise
        if self._context.soft_fallback:  # another lock in this process recorded the path as flockless
            self.release(force=True)
            raise LocksUnsupported(self.lock_file)
        return proxy


def sweep_lock(path: str | os.PathLike[str], timeout: float = -1) -> SweepLock:
    """A real flock on `path` (created if missing), waiting at most `timeout` seconds (negative: for ever)."""
    return SweepLock(path, timeout=timeout)
