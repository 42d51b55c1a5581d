"""The one way a frozen submission copy leaves the sweep directory, with what lies beside it: submissions/<id>/ (the
copy the grader loads), <id>.scan/ (the freeze's signed scan, grading/frozenscan.py) and <id>.partial/ (a freeze
under way or interrupted, run/artifacts.py). Every deleter (the grader's record stage and final part, retention's
prune, the scan's reader, the freeze's clean-up) calls `remove_frozen` or `remove_entry`; tests/test_frozencopies.py
fails if a module under a2rl/ outside its reviewed list (none that touch submissions/) removes files.

Why one way: a copy is a directory of files, and removing one is not atomic. Each entry is first renamed to a
hidden trash name in the same directory (.<name>.<token>.deleting: one rename, atomic on every POSIX file system)
and only then removed, so a crash or a full disk part-way leaves no <id>/ with files missing that a grader or the
final part would take for the whole copy; what is left is trash, removed by the next deletion in that directory
(and counted meanwhile in the run's disk use, recording/diskuse.py). Idempotent: a missing entry is nothing to
do, and racing deleters (two graders, two nodes) each either rename it or find it gone. A symlink in a copy's place
is unlinked, never followed, and shutil.rmtree removes the tree without following links inside it."""

from __future__ import annotations

import logging
import os
import re
import secrets
import shutil
from pathlib import Path

log = logging.getLogger("a2rl.grader")

SCAN = ".scan"  # the freeze's scan beside the copy
PARTIAL = ".partial"  # the freeze's copy before it is renamed into place


def trash_pattern(name: str) -> str:
    """The regular expression of a deletion's trash name for entries whose names match `name` (a regex)."""
    return rf"\.(?:{name})\.[0-9a-f]{{12}}\.deleting"


TRASH = re.compile(trash_pattern(".+"))
BESIDE = ("", SCAN, PARTIAL)  # a copy's own entry and what lies beside it


class NotAFrozenCopy(ValueError):
    """A path that is not an entry directly in the submissions directory it is said to be in."""


def scan_path(copy: Path) -> Path:
    return copy.with_name(copy.name + SCAN)


def partial_path(copy: Path) -> Path:
    return copy.with_name(copy.name + PARTIAL)


def _checked(path: Path, within: Path) -> Path:
    """`path` as the entry `within / name`, or NotAFrozenCopy: the name must be one component, and the directory
    it names the one it is said to be in (compared resolved: the entry itself is never resolved)."""
    path = Path(path)
    if path.name in ("", ".", "..") or path.parent.resolve() != Path(within).resolve():
        raise NotAFrozenCopy(f"{path} is not an entry of {within}")
    return Path(within) / path.name


def _sweep_trash(within: Path) -> None:
    """Remove what earlier deletions left (a crash between the rename and the removal; files another user owns)."""
    try:
        names = [n for n in os.listdir(within) if TRASH.fullmatch(n)]
    except FileNotFoundError:
        return
    for name in names:
        _remove_renamed(within / name)


def _remove_renamed(trash: Path) -> None:
    try:
        if trash.is_dir() and not trash.is_symlink():
            shutil.rmtree(trash)  # fd-based on Linux: links inside are removed, not followed
        else:
            trash.unlink()
    except FileNotFoundError:
        pass  # a racing deleter removed it
    except OSError as e:  # left as trash: the next deletion tries again; the copy itself is already gone
        log.warning("%s could not be removed yet (%s); it is retried at the next deletion", trash.name, e)


def _remove_one(entry: Path) -> bool:
    trash = entry.with_name(f".{entry.name}.{secrets.token_hex(6)}.deleting")
    try:
        os.rename(entry, trash)  # the entry itself: a symlink is renamed, not followed
    except FileNotFoundError:
        return False
    _remove_renamed(trash)
    return True


def remove_entry(path: Path, within: Path) -> bool:
    """Delete the entry `path` of the directory `within` (a directory, file or symlink; never what a link points
    to): renamed to trash, then removed. False if it was not there; OSError if it cannot be renamed;
    NotAFrozenCopy for a path not directly in `within`."""
    removed = _remove_one(_checked(path, within))
    _sweep_trash(Path(within))
    return removed


def remove_frozen(copy: Path, submissions: Path) -> list[str]:
    """Delete the frozen copy `copy` (submissions/<id>) and what lies beside it (its scan, a stale partial freeze);
    the names deleted (empty: none was there). NotAFrozenCopy for a path not directly in `submissions`."""
    entry = _checked(copy, submissions)
    removed = [e.name for e in (entry.with_name(entry.name + s) for s in BESIDE) if _remove_one(e)]
    _sweep_trash(Path(submissions))
    return removed
