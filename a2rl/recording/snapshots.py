"""The agent's code at every submission, recorded outside its reach:

blobs/<sha[:2]>/<sha256>          file contents, shared by every snapshot of every run (deduplicated)
runs/<id>/snapshots/NNN.json      CodeSnapshot of code/ when submission NNN (its seq) was made
runs/<id>/snapshots/NNN.diff      unified diff against the run's previous snapshot
"""

from __future__ import annotations

import difflib
import errno
import fnmatch
import hashlib
import os
import stat
import tempfile
from pathlib import Path
from typing import Callable, Iterator

from pydantic import BaseModel

from a2rl.recording import nofollow
from a2rl.records import Record, atomic_write_text, disk_full, now
from a2rl.spec.sweep import RecordingSettings
from a2rl.units import MIB


class SnapshotFile(BaseModel):
    path: str  # relative to code/; bytes that are not UTF-8 shown as \xNN
    raw_path: str | None = None  # the path's bytes in hex, when they are not UTF-8
    sha256: str
    size: int


class SkippedFile(BaseModel):
    path: str
    raw_path: str | None = None
    size: int
    # "over <cap>" (max_file_mb, max_total_mb, max_run_mb, storage.run_gb, workspace_max_*), "symlink", "fifo",
    # "socket", "device", "unreadable (...)", "changed while read (...)", "deeper than ...", "over ... entries ..."
    reason: str


class CodeSnapshot(Record):
    run_id: str
    submission_id: str
    seq: int
    taken_at: float
    files: list[SnapshotFile]
    skipped: list[SkippedFile]
    total_bytes: int
    previous_seq: int | None  # the snapshot the diff is against
    added: list[str]
    modified: list[str]
    removed: list[str]


def blob_path(sweep_root: Path, sha: str) -> Path:
    return sweep_root / "blobs" / sha[:2] / sha


def snapshot_dir(sweep_root: Path, run_id: str) -> Path:
    return sweep_root / "runs" / run_id / "snapshots"


def load_snapshots(sweep_root: Path, run_id: str) -> list[CodeSnapshot]:
    return [CodeSnapshot.load(p) for p in sorted(snapshot_dir(sweep_root, run_id).glob("[0-9]*.json"))]


class Skip(Exception):
    """Raised by a `keep` callback to list the file as skipped, with this reason."""


def collect(
    root: Path,
    exclude: list[str],
    max_file_mb: float,
    max_total_mb: float,
    caps: tuple[str, str],
    keep: Callable[[str, int, int], tuple[str, int]],
    skip_top: frozenset[str] = frozenset(),
) -> tuple[list[SnapshotFile], list[SkippedFile]]:
    """Each regular file under root, in path order, within the caps (`caps` names them in skip reasons), handed
    to `keep(path, fd, size)` on the descriptor its size was checked on (it returns the sha256 and the bytes
    kept); everything else is listed as skipped with why, unopened (symlinks, FIFOs, sockets, devices). Nothing
    here blocks or follows a link (nofollow.py). OSError when root itself cannot be opened as a directory."""

    def excluded(rel: str, name: str) -> bool:
        return any(fnmatch.fnmatch(name, g) for g in exclude) or ("/" not in rel and name in skip_top)

    files, skipped, total = [], [], 0

    def skip(rel: str, size: int, reason: str) -> None:
        skipped.append(SkippedFile(path=nofollow.shown(rel), raw_path=nofollow.raw_name(rel), size=size, reason=reason))

    root_fd = nofollow.open_last(root)
    try:
        for rel, name, dir_fd, st in nofollow.walk(root_fd, skip=excluded):
            if isinstance(st, str):
                skip(rel, 0, st)
                continue
            if not stat.S_ISREG(st.st_mode):  # never opened: a FIFO would block, a link could lead anywhere
                skip(rel, 0, nofollow.kind(st.st_mode))
                continue
            try:
                fd, st = nofollow.open_regular(name, dir_fd)
            except nofollow.Changed as e:
                skip(rel, 0, e.strerror)
                continue
            except OSError as e:
                skip(rel, 0, f"unreadable ({e.strerror})")
                continue
            try:
                size = st.st_size  # apparent size: a sparse file counts in full
                if size > max_file_mb * MIB:
                    skip(rel, size, f"over {caps[0]}")
                elif total + size > max_total_mb * MIB:
                    skip(rel, size, f"over {caps[1]}")
                else:
                    sha, size = keep(rel, fd, size)
                    files.append(
                        SnapshotFile(path=nofollow.shown(rel), raw_path=nofollow.raw_name(rel), sha256=sha, size=size)
                    )
                    total += size
            except Skip as e:
                skip(rel, size, str(e))
            except OSError as e:  # changed by the agent meanwhile; a full sweep file system is not the file's fault
                if disk_full(e):
                    raise
                skip(rel, size, f"changed while read ({e.strerror})")
            finally:
                os.close(fd)
    finally:
        os.close(root_fd)
    return files, skipped


def _store_blob(sweep_root: Path, data: bytes) -> str:
    sha = hashlib.sha256(data).hexdigest()
    dest = blob_path(sweep_root, sha)
    if not dest.exists():
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=".blob.")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        except BaseException:
            os.unlink(tmp)
            raise
        os.replace(tmp, dest)  # same content under the same name: a concurrent writer's copy is as good
    return sha


def _lines(sweep_root: Path, sha: str | None) -> list[str] | None:
    """A blob's text lines; None when it is not text."""
    if sha is None:
        return []
    try:
        return blob_path(sweep_root, sha).read_bytes().decode("utf-8").splitlines(keepends=True)
    except UnicodeDecodeError:
        return None


def unified_diff(sweep_root: Path, before: dict[str, str], after: dict[str, str]) -> str:
    """Diff of two {path: sha} trees, file by file in path order."""
    out = []
    for path in sorted(set(before) | set(after)):
        a, b = before.get(path), after.get(path)
        if a == b:
            continue
        la, lb = _lines(sweep_root, a), _lines(sweep_root, b)
        if la is None or lb is None:
            out.append(f"Binary file {path} differs\n")
            continue
        diff = list(
            difflib.unified_diff(
                la, lb, "/dev/null" if a is None else f"a/{path}", "/dev/null" if b is None else f"b/{path}"
            )
        )
        out += [line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in diff]
    return "".join(out)


def snapshot_code(
    sweep_root: Path,
    run_id: str,
    code: Path,
    *,
    submission_id: str,
    seq: int,
    settings: RecordingSettings,
    room_bytes: int | None = None,
) -> CodeSnapshot:
    """Record code/ as it is at submission `seq`, and its diff to the run's previous snapshot. `room_bytes`: what
    the run's storage budget (storage.run_gb) leaves; new contents past it are skipped."""
    earlier = load_snapshots(sweep_root, run_id)
    stored = {f.sha256: f.size for s in earlier for f in s.files}  # what the run's snapshots hold already
    run_bytes = sum(stored.values())
    room = float("inf") if room_bytes is None else room_bytes

    def keep(rel: str, fd: int, size: int) -> tuple[str, int]:
        nonlocal run_bytes, room
        data = nofollow.read_capped(fd, size)
        if data is None:
            raise nofollow.Changed(errno.EFBIG, f"grew past {size} bytes")
        sha = hashlib.sha256(data).hexdigest()
        if sha not in stored:  # new content counts against the run's cap
            if run_bytes + len(data) > settings.max_run_mb * MIB:
                raise Skip("over max_run_mb")
            if len(data) > room:
                raise Skip("over storage.run_gb")
            stored[sha] = len(data)
            run_bytes += len(data)
            room -= len(data)
        return _store_blob(sweep_root, data), len(data)

    files, skipped = collect(
        code, settings.exclude, settings.max_file_mb, settings.max_total_mb, ("max_file_mb", "max_total_mb"), keep
    )
    prev = [s for s in earlier if s.seq < seq]
    before = {f.path: f.sha256 for f in prev[-1].files} if prev else {}
    after = {f.path: f.sha256 for f in files}
    snap = CodeSnapshot(
        run_id=run_id,
        submission_id=submission_id,
        seq=seq,
        taken_at=now(),
        files=files,
        skipped=skipped,
        total_bytes=sum(f.size for f in files),
        previous_seq=prev[-1].seq if prev else None,
        added=sorted(set(after) - set(before)),
        removed=sorted(set(before) - set(after)),
        modified=sorted(p for p in set(after) & set(before) if after[p] != before[p]),
    )
    d = snapshot_dir(sweep_root, run_id)
    atomic_write_text(d / f"{seq:03d}.diff", unified_diff(sweep_root, before, after))
    snap.dump(d / f"{seq:03d}.json")
    return snap


def snapshot_text(sweep_root: Path, snap: CodeSnapshot) -> Iterator[tuple[str, str]]:
    """(path, text) of a snapshot's text files."""
    for f in snap.files:
        lines = _lines(sweep_root, f.sha256)
        if lines is not None:
            yield f.path, "".join(lines)
