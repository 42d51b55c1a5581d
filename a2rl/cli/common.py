"""What the commands share: opening a sweep directory, with a one-line error for a path that is not one."""

from __future__ import annotations

from pathlib import Path


class NotASweep(Exception):
    pass


def open_sweep_dir(path: Path):
    """The sweep directory at `path`, or NotASweep (printed as one line, exit 2, by main)."""
    from a2rl.store.sweepdir import SweepDir

    sweep = SweepDir(path)
    if not sweep.exists():
        raise NotASweep(not_a_sweep(path))
    return sweep


def not_a_sweep(path: Path) -> str:
    """Why `path` (no sweep.json in it) is no sweep directory: it does not exist, or holds no sweep."""
    if not Path(path).exists():
        return f"{path} does not exist (a launch writes a2rl-sweeps/<sweep name> unless given --sweep-dir)"
    return f"{path} is not a sweep directory (no sweep.json)"
