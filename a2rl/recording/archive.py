"""After a run, what the agent left in a workspace outside the sweep directory (node-local scratch), copied to
`runs/<id>/workspace/` without weights, data or caches, within the sweep's `recording` caps."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from a2rl.recording import nofollow
from a2rl.recording.snapshots import SkippedFile, SnapshotFile, collect
from a2rl.records import Record, now, sha256_file
from a2rl.spec.sweep import RecordingSettings

WORKSPACE_SKIP = frozenset({"data", "models", "home", "tmp"})  # copies of inputs, links, caches


class WorkspaceArchive(Record):
    """runs/<id>/workspace/manifest.json: what of the agent's workspace was kept after the run."""

    run_id: str
    source: str  # the workspace on scratch
    archived_at: float
    files: list[SnapshotFile]
    skipped: list[SkippedFile]
    total_bytes: int


def archive_workspace(ws_root: Path, dest: Path, run_id: str, settings: RecordingSettings) -> WorkspaceArchive:
    """Copy what the agent left (code/, output/ without weights, its top-level files) to `dest` in the sweep
    directory, so it stays browsable when scratch is node-local; within the recording caps. Replaces an
    earlier archive of the run (a resumed run's is newer)."""
    tmp = dest.with_name(f".{dest.name}.partial")
    shutil.rmtree(tmp, ignore_errors=True)

    def keep(rel: str, fd: int, size: int) -> tuple[str, int]:
        target = tmp / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            nofollow.copy_exact(fd, out, size)
        finally:
            os.close(out)
        return sha256_file(target), size

    files, skipped = collect(
        ws_root.resolve(),
        settings.exclude,
        settings.workspace_max_file_mb,
        settings.workspace_max_mb,
        ("workspace_max_file_mb", "workspace_max_mb"),
        keep,
        WORKSPACE_SKIP,
    )
    archive = WorkspaceArchive(
        run_id=run_id,
        source=str(ws_root),
        archived_at=now(),
        files=files,
        skipped=skipped,
        total_bytes=sum(f.size for f in files),
    )
    archive.dump(tmp / "manifest.json")
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(tmp, dest)
    return archive
