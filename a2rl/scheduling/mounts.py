"""The mount a path lies on, from /proc/mounts: its type and options tell which file system the sweep directory is
on (fscheck.py) and what a compute node sees (node.py)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Mount:
    point: str
    fstype: str
    options: str
    source: str

    def option(self, name: str) -> str | None:
        """The value of a mount option (`""` for a flag), None where it is not set."""
        for o in self.options.split(","):
            key, _, value = o.partition("=")
            if key == name:
                return value
        return None


def _unescape(field: str) -> str:
    return field.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def mount_of(path: Path, mounts: str | None = None) -> Mount:
    """The mount `path` lies on: the longest mount point above its real path in /proc/mounts (`mounts`)."""
    text = Path("/proc/mounts").read_text() if mounts is None else mounts
    real = os.path.realpath(path)
    best = Mount("/", "unknown", "", "")
    for line in text.splitlines():
        f = line.split()
        if len(f) < 4:
            continue
        point = _unescape(f[1])
        if (real == point or real.startswith(point.rstrip("/") + "/")) and len(point) >= len(best.point):
            best = Mount(point, f[2], f[3], _unescape(f[0]))
    return best
