"""The agent's code at every submission, recorded outside its reach:

    blobs/<sha[:2]>/<sha256>          file contents, shared by every snapshot of every run (deduplicated)
    runs/<id>/snapshots/NNN.json      CodeSnapshot of code/ when submission NNN (its seq) was made
    runs/<id>/snapshots/NNN.diff      unified diff against the run's previous snapshot
"""

from __future__ import annotations

import difflib
import fnmatch
import hashlib
import os
import tempfile
from pathlib import Path
from typing import Iterator

from pydantic import BaseModel

from a2rl.records import Record, atomic_write_text, now
from a2rl.spec.sweep import RecordingSettings

MB = 1 << 20


class SnapshotFile(BaseModel):
    path: str  # relative to code/
    sha256: str
    size: int


class SkippedFile(BaseModel):
    path: str
    size: int
    reason: str  # "over <cap>" (max_file_mb, max_total_mb, max_run_mb, workspace_max_*), "symlink", "unreadable"


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


def walk(root: Path, exclude: list[str], max_file_mb: float, max_total_mb: float, caps: tuple[str, str],
          skip_top: frozenset[str] = frozenset()) -> tuple[list[tuple[str, Path, int]], list[SkippedFile]]:
    """Files under root to keep, in path order, within the caps (`caps` names them in skip reasons)."""
    excluded = lambda name: any(fnmatch.fnmatch(name, g) for g in exclude)  # noqa: E731
    keep, skipped, total = [], [], 0
    for dirpath, dirnames, filenames in os.walk(root):
        top = Path(dirpath) == root
        dirnames[:] = sorted(d for d in dirnames if not excluded(d) and not (top and d in skip_top))
        for name in sorted(filenames):
            full = Path(dirpath) / name
            rel = str(full.relative_to(root))
            if excluded(name) or (top and name in skip_top):
                continue
            if full.is_symlink():  # could point anywhere (the base model, outside the workspace)
                skipped.append(SkippedFile(path=rel, size=0, reason="symlink"))
                continue
            try:
                size = full.stat().st_size
            except OSError:
                skipped.append(SkippedFile(path=rel, size=0, reason="unreadable"))
                continue
            if size > max_file_mb * MB:
                skipped.append(SkippedFile(path=rel, size=size, reason=f"over {caps[0]}"))
            elif total + size > max_total_mb * MB:
                skipped.append(SkippedFile(path=rel, size=size, reason=f"over {caps[1]}"))
            else:
                keep.append((rel, full, size))
                total += size
    return keep, skipped


def _store_blob(sweep_root: Path, data: bytes) -> str:
    sha = hashlib.sha256(data).hexdigest()
    dest = blob_path(sweep_root, sha)
    if not dest.exists():
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=".blob.")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
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
        diff = list(difflib.unified_diff(la, lb, "/dev/null" if a is None else f"a/{path}",
                                         "/dev/null" if b is None else f"b/{path}"))
        out += [line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in diff]
    return "".join(out)


def snapshot_code(sweep_root: Path, run_id: str, code: Path, *, submission_id: str, seq: int,
                  settings: RecordingSettings) -> CodeSnapshot:
    """Record code/ as it is at submission `seq`, and its diff to the run's previous snapshot."""
    keep, skipped = walk(code, settings.exclude, settings.max_file_mb, settings.max_total_mb,
                          ("max_file_mb", "max_total_mb"))
    earlier = load_snapshots(sweep_root, run_id)
    stored = {f.sha256: f.size for s in earlier for f in s.files}  # what the run's snapshots hold already
    run_bytes = sum(stored.values())
    files = []
    for rel, full, size in keep:
        try:
            data = full.read_bytes()
        except OSError:  # removed or made unreadable by the agent meanwhile
            skipped.append(SkippedFile(path=rel, size=size, reason="unreadable"))
            continue
        sha = hashlib.sha256(data).hexdigest()
        if sha not in stored:  # new content counts against the run's cap
            if run_bytes + len(data) > settings.max_run_mb * MB:
                skipped.append(SkippedFile(path=rel, size=len(data), reason="over max_run_mb"))
                continue
            stored[sha] = len(data)
            run_bytes += len(data)
        files.append(SnapshotFile(path=rel, sha256=_store_blob(sweep_root, data), size=len(data)))
    prev = [s for s in earlier if s.seq < seq]
    before = {f.path: f.sha256 for f in prev[-1].files} if prev else {}
    after = {f.path: f.sha256 for f in files}
    snap = CodeSnapshot(run_id=run_id, submission_id=submission_id, seq=seq, taken_at=now(), files=files,
                        skipped=skipped, total_bytes=sum(f.size for f in files),
                        previous_seq=prev[-1].seq if prev else None,
                        added=sorted(set(after) - set(before)), removed=sorted(set(before) - set(after)),
                        modified=sorted(p for p in set(after) & set(before) if after[p] != before[p]))
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
