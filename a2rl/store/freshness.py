"""Leases and heartbeats judged on the reader's own clock.

Another node's wall clock is never compared with this one's: nodes' clocks differ (by seconds under NTP, by hours
when one jumps). A reader instead remembers what it last read of a lease or heartbeat (a renewal counter, a
heartbeat's stamp, or "unreadable") and when, on its own `time.monotonic()`; the holder is presumed gone once that
token has not changed for the lease's length. A reader that has never seen a record judges it from its first read:
a dead holder's lease is taken `lease_s` after the reader first saw it (one poll later at most, when it watches).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Hashable

UNREADABLE = "unreadable"  # the token of a record that would not read: it expires like a silent one


class Watch:
    """What this process last read of each watched record, and since when on its monotonic clock."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self._seen: dict[Hashable, tuple[Hashable, float]] = {}

    def silent_for(self, key: Hashable, token: Hashable) -> float:
        """Seconds of this reader's clock since `key` last read as something other than `token` (0 when it just
        changed, or the reader never saw it before)."""
        t = self.clock()
        last = self._seen.get(key)
        if last is None or last[0] != token:
            self._seen[key] = (token, t)
            return 0.0
        return t - last[1]

    def seen(self, key: Hashable) -> bool:
        return key in self._seen

    def forget(self, key: Hashable) -> None:
        self._seen.pop(key, None)


WATCH = Watch()  # this process's: every long-lived reader (grader, follower, top-up job) keeps its memory here


def heartbeat_stale(
    key: Hashable, beat_at: float, host: str | None, limit_s: float, wall: Callable[[], float] = time.time
) -> bool:
    """Whether a heartbeat stamped `beat_at` by a process on `host` has stopped. A heartbeat written on this host
    is judged by its stamp (one clock); another host's only by how long this reader has watched it not change,
    so a reader that has just started cannot call it stale yet (the follower, watching, will)."""
    silent = WATCH.silent_for(key, beat_at)
    if host == socket.gethostname():
        return wall() - beat_at > limit_s
    return silent > limit_s
