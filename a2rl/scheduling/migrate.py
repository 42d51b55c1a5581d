"""`a2rl migrate`: rewrite a sweep directory's older records as this a2rl's versions (upgrades.py), in place.

Every reader upgrades older records as it reads them, so a sweep needs no migration to be read; migrating makes
the files themselves current (the fast read path, and tools that read the JSON without a2rl). Each file is copied
to SWEEP/migrate-backup/<UTC time>/ before it is replaced atomically; a signed record is verified with the
sweep's key before it is signed again, so a forged one is never laundered (it is left as it is and counted). A
sweep at work is refused: a job writing a record while it is migrated would lose one of the two writes. So is a
user other than the sweep's owner, root included: what it wrote (the new records, the backup) would be that user's,
and a 0600 record root owns is one the sweep's own a2rl can no longer read. A rewritten record keeps its mode.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from a2rl.drivers.endpoint import DriverEndpoint
from a2rl.recording.archive import WorkspaceArchive
from a2rl.recording.snapshots import CodeSnapshot
from a2rl.records import Record, RecordError, atomic_write_text, read_bytes
from a2rl.reporting.metrics import RunMetrics, SubmissionRow
from a2rl.run.audit import AuditRecord
from a2rl.run.environment import RunEnvironment
from a2rl.run.workspace import RunMeta
from a2rl.scheduling.fscheck import FsVerdict
from a2rl.scheduling.node import ProbeReport
from a2rl.spec.grid import RunSpec
from a2rl.store.baselines import BaselineRecord
from a2rl.store.integrity import SignedRecord
from a2rl.store.ledger import LedgerEntry
from a2rl.store.noise import NoiseRecord
from a2rl.store.queue import Lease, QueueEntry
from a2rl.store.results import RunResult
from a2rl.store.retries import ReadRetries
from a2rl.store.services import ServiceJobs
from a2rl.store.stages import StageLog
from a2rl.store.sweepdir import FrozenSweep, GraderBeat, RunIndex, RunStatus, SweepDir
from a2rl.store.verdicts import Inspection, Overrides

# Where each record lives in a sweep directory (glob patterns; the first match names a file's class). PreparedData
# and SplitRecord live in the data root, outside it: they are upgraded as they are read.
KINDS: tuple[tuple[str, type[Record]], ...] = (
    ("sweep.json", FrozenSweep),
    ("runs.json", RunIndex),
    ("fscheck.json", FsVerdict),
    ("fscheck/report-*.json", ProbeReport),
    ("audit.json", AuditRecord),
    ("graders/jobs.json", ServiceJobs),
    ("topup/jobs.json", ServiceJobs),
    ("drivers/*/jobs.json", ServiceJobs),
    ("drivers/*/endpoint.json", DriverEndpoint),
    ("graders/grader*.json", GraderBeat),
    ("baselines/*.json", BaselineRecord),
    ("noise/*.json", NoiseRecord),
    ("retries/*.json", ReadRetries),
    ("ledger/*/*.json", LedgerEntry),
    ("ledger/*/final/*.json", LedgerEntry),
    ("queue/pending/*.json", QueueEntry),
    ("queue/done/*.json", QueueEntry),
    ("queue/rejected/*.json", QueueEntry),
    ("queue/leases/*.json", Lease),
    ("runs/*/run.json", RunSpec),
    ("runs/*/status.json", RunStatus),
    ("runs/*/result.json", RunResult),
    ("runs/*/env-*.json", RunEnvironment),
    ("runs/*/inspection.json", Inspection),
    ("runs/*/overrides.json", Overrides),
    ("runs/*/stages.json", StageLog),
    ("runs/*/report/metrics.json", RunMetrics),
    ("runs/*/report/summary.jsonl", SubmissionRow),  # one record a line
    ("runs/*/snapshots/[0-9]*.json", CodeSnapshot),
    ("runs/*/workspace/manifest.json", WorkspaceArchive),
    ("runs/*/workspace/run_meta.json", RunMeta),
)
BACKUP_DIR = "migrate-backup"


class SweepAtWork(Exception):
    """The sweep has runs or graders at work (migrating now could lose a write), or belongs to another user."""


@dataclass
class Migration:
    root: Path
    backup: Path
    migrated: list[Path] = field(default_factory=list)
    current: int = 0  # records already at this a2rl's version
    left: list[str] = field(default_factory=list)  # files left as they are, and why

    def summary(self) -> str:
        total = len(self.migrated) + self.current
        left = f"; left {len(self.left)} as they are: {'; '.join(self.left)}" if self.left else ""
        if not self.migrated:
            return f"nothing to migrate: all {total} record files in {self.root} are this a2rl's versions{left}"
        return (
            f"migrated {len(self.migrated)} of {total} record files in {self.root} to this a2rl's versions"
            f" (originals in {self.backup}){left}"
        )


def record_files(root: Path) -> list[tuple[Path, type[Record]]]:
    """Every record file of the sweep directory `root` with its class, in KINDS order."""
    seen: dict[Path, type[Record]] = {}
    for pattern, cls in KINDS:
        for path in sorted(root.glob(pattern)):
            if path.is_file() and not path.is_symlink():
                seen.setdefault(path, cls)
    return list(seen.items())


def at_work(sweep: SweepDir) -> list[str]:
    """What of the sweep is at work now: runs heart-beating without a result, graders serving."""
    busy = [
        run.run_id
        for run in sweep.runs()
        if not sweep.result_path(run.run_id).exists()
        and (status := sweep.status(run.run_id)) is not None
        and status.state in ("running", "finishing")
        and not status.stale()
    ]
    return busy + [f"grader {beat.holder}" for beat in sweep.serving_graders()]


def migrate(sweep: SweepDir, stamp: str | None = None) -> Migration:
    """Rewrite the sweep's older records in place (the module docstring); SweepAtWork while it is at work."""
    if busy := at_work(sweep):
        raise SweepAtWork(
            f"{sweep.root} is at work ({', '.join(busy[:3])}{' ...' if len(busy) > 3 else ''}): migrate it once it"
            " has stopped (`a2rl status` shows when; `a2rl cancel` stops it)"
        )
    if (owner := sweep.root.stat().st_uid) != os.geteuid():
        name = _user_name(owner)
        raise SweepAtWork(
            f"{sweep.root} belongs to {name}: run `a2rl migrate` as {name} (e.g. `sudo -u {name} a2rl migrate "
            f"{sweep.root}`), so that the records it rewrites and their backup stay theirs"
        )
    stamp = stamp or time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    m = Migration(sweep.root, sweep.root / BACKUP_DIR / stamp)
    for path, cls in record_files(sweep.root):
        try:
            text = _current_text(path, cls, sweep)
        except RecordError as e:  # unreadable, of an unknown version, or forged
            m.left.append(str(e))
            continue
        if text is None:
            m.current += 1
            continue
        backup = m.backup / path.relative_to(sweep.root)
        backup.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, backup)
        atomic_write_text(path, text)
        shutil.copymode(backup, path)  # written 0600 (a temporary file's mode): the original's, as a group shares it
        m.migrated.append(path)
    return m


def _current_text(path: Path, cls: type[Record], sweep: SweepDir) -> str | None:
    """The file's text with its records at this a2rl's version; None when they are already."""
    raw = read_bytes(path)
    lines = raw.splitlines() if path.suffix == ".jsonl" else [raw]
    lines = [line for line in lines if line.strip()]
    if all(_version(line) == cls.SCHEMA for line in lines):
        return None
    records = [cls.load(path, line) for line in lines]
    for rec in records:
        if isinstance(rec, SignedRecord) and rec.hmac is not None:
            rec.verify(sweep.key, path).sign(sweep.key)  # what its writer signed, signed again as it is now
    if path.suffix == ".jsonl":
        return "".join(r.json_line() for r in records)
    return records[0].json_text()


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _version(raw: bytes) -> object:
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    return data.get("schema_version") if isinstance(data, dict) else None
