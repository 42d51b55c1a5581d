"""What a run leaves in the sweep directory, in bytes, for its storage budget (`storage.run_gb`, run/submit.py) and
`a2rl status`: its frozen submissions (submissions/<run>.<seq>, with a freeze under way, the freeze's scan and a
deletion's trash beside them), its run directory (records, logs, code snapshots and diffs, an interrupted run's
resume copy) and the blobs its code snapshots name (blobs/ is shared by every run: each run is charged every
distinct content its snapshots hold, once). Its queue and ledger entries, a few KiB each, are not counted."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from a2rl.recording.frozencopies import BESIDE, trash_pattern
from a2rl.recording.snapshots import load_snapshots
from a2rl.records import RecordError
from a2rl.store.sweepdir import SweepDir
from a2rl.units import GIB


def tree_bytes(root: Path) -> int:
    """Disk bytes under `root` (allocated blocks, links not followed; what vanishes meanwhile is not counted)."""
    total = 0
    stack = [str(root)]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for e in it:
                    try:
                        st = e.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    total += st.st_blocks * 512
                    if e.is_dir(follow_symlinks=False):
                        stack.append(e.path)
        except OSError:
            continue
    return total


@dataclass(frozen=True)
class DiskUse:
    frozen: int  # the run's frozen submissions on disk now, with what lies beside them
    frozen_copies: int  # how many
    run_dir: int
    blobs: int

    @property
    def total(self) -> int:
        return self.frozen + self.run_dir + self.blobs

    def describe(self) -> str:
        return (
            f"{self.total / GIB:.2f} GiB ({self.frozen_copies} frozen submission(s) {self.frozen / GIB:.2f} GiB, "
            f"code blobs {self.blobs / GIB:.2f} GiB, run directory {self.run_dir / GIB:.2f} GiB)"
        )


def frozen_copies(sweep: SweepDir, run_id: str, *, beside: bool = False) -> list[Path]:
    """The run's frozen submission directories in submissions/; `beside`: with what lies beside them (a freeze's
    .partial copy, its .scan, a deletion's trash: recording/frozencopies.py)."""
    own = re.escape(run_id) + r"\.\d+"
    if beside:
        suffixes = "|".join(re.escape(suffix) for suffix in BESIDE if suffix)
        own = rf"(?:{own}(?:{suffixes})?)|{trash_pattern(own + '.*')}"
    pattern = re.compile(own)
    try:
        return [p for p in sweep.submissions.iterdir() if pattern.fullmatch(p.name)]
    except FileNotFoundError:
        return []


def run_disk_use(sweep: SweepDir, run_id: str) -> DiskUse:
    copies = frozen_copies(sweep, run_id, beside=True)
    try:
        snaps = load_snapshots(sweep.root, run_id)
    except (OSError, ValueError, RecordError):  # damaged (load's RecordError): its files are in the run directory
        snaps = []
    blobs = sum({f.sha256: f.size for s in snaps for f in s.files}.values())
    return DiskUse(
        frozen=sum(tree_bytes(p) for p in copies),
        frozen_copies=len(frozen_copies(sweep, run_id)),
        run_dir=tree_bytes(sweep.run_dir(run_id)),
        blobs=blobs,
    )
