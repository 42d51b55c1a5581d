"""Reads that a shared file system makes fail for a moment, retried with backoff and counted.

On NFS or Lustre a record another node is replacing can read torn (half a JSON object from a stale page), raise
`ESTALE`, or vanish between listing a directory and opening the file. None of these may end a grader, a follower, a
top-up job or an agent job: the read is retried, and each retry counted in `retries/<process>.json` in the sweep
directory, which `a2rl status` sums. A record that is wrong (another version, a bad signature) is not retried.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from filelock import Timeout

from a2rl.records import Record, RecordError, missing

log = logging.getLogger("a2rl.retries")
T = TypeVar("T")

ATTEMPTS = 5
FIRST_WAIT_S = 0.05  # doubled after each failed attempt: 0.05 + 0.1 + 0.2 + 0.4 s before the last


class ReadRetries(Record):
    """How many reads one process retried, by what it was reading (lease, queue entry, status, heartbeat...)."""

    process: str
    counts: dict[str, int]


def transient(e: BaseException) -> bool:
    """A read that may succeed if tried again: the file would not open or read (ESTALE, vanished, EIO) or did
    not parse (torn); not a record of the wrong version or shape, nor one that does not verify."""
    if isinstance(e, RecordError):
        return isinstance(e.__cause__, (OSError, ValueError)) and not isinstance(e.__cause__, Timeout)
    return isinstance(e, OSError) and not isinstance(e, Timeout)  # a held lock is not a read: its caller waits


def gone(e: BaseException) -> bool:
    """The file is not there (removed, or retired by another process between listing and opening)."""
    return isinstance(e, FileNotFoundError) or isinstance(e, RecordError) and missing(e)


class RetryCounter:
    """This process's retried reads; written to `path` (once bound to a sweep) at each one, so status sees them."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.path: Path | None = None

    def bind(self, sweep_root: Path) -> None:
        self.path = Path(sweep_root) / "retries" / f"{socket.gethostname()}-{os.getpid()}.json"

    def note(self, what: str, err: BaseException) -> None:
        self.counts[what] += 1
        log.warning("retrying a read of a %s: %s", what, err)
        if self.path is not None:
            try:
                ReadRetries(process=self.path.stem, counts=dict(self.counts)).dump(self.path)
            except OSError as e:  # the count is a diagnostic: never worth ending the process for
                log.warning("read retries not recorded: %s", e)


RETRIES = RetryCounter()


def retried(read: Callable[[], T], what: str, sleep: Callable[[float], object] = time.sleep) -> T:
    """`read()`, tried again with backoff while it fails transiently (each retry counted); its last error raised."""
    wait = FIRST_WAIT_S
    for _ in range(ATTEMPTS - 1):
        try:
            return read()
        except (RecordError, OSError) as e:
            if not transient(e) or gone(e):  # gone: the caller decides what a vanished record means
                raise
            RETRIES.note(what, e)
        sleep(wait)
        wait *= 2
    return read()


def read_retries(sweep_root: Path) -> dict[str, int]:
    """Every process's retried reads in the sweep, summed by what was read."""
    total: Counter[str] = Counter()
    for path in sorted((Path(sweep_root) / "retries").glob("*.json")):
        try:
            total.update(ReadRetries.load(path).counts)
        except RecordError:
            continue
    return dict(total)
