"""The sweep directory's file system, checked from where it is used before a2rl trusts its locks.

The queue, the ledger and the leases are correct only if `flock` on the sweep directory excludes across nodes,
which on Lustre mounted `localflock`, NFS mounted `nolock`/`local_lock=…` or BeeGFS without global locks it
silently does not. So, once per sweep (`fscheck.json`; a relaunch reuses a passing verdict unless asked to probe
again):
- here (the launching node): the mount (type and options, from /proc/mounts) and whether `flock` works at all
  (ENOLCK/ENOSYS: refused; filelock would fall back to a soft lock, which a2rl never runs its queue on);
- on Slurm, a short probe job on the sweep's partition (node.py's NodeProbe) tries to take the lock the
  launcher holds: if it gets it, locks are node-local and the launch is refused. The report it renames into
  the sweep directory measures the visibility lag: from when this node first could know the file was there
  (listed in the directory, or the job seen ended) to when opening its name works, polled as graders poll; a
  lag longer than the grader's lease is refused. The probe also compares the node's view of the sweep (node.py).
The local executor runs everything on this node: nothing extra is submitted.
"""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path
from typing import Callable

from a2rl.records import Record, RecordError, now
from a2rl.scheduling.base import QueueFull, Scheduler, Schedulers, Shape
from a2rl.scheduling.mounts import Mount, mount_of
from a2rl.scheduling.node import NodeFacts, NodeProbe, ProbeReport, differences, node_facts, probe_dir, try_lock
from a2rl.spec.clusters import profile_of
from a2rl.spec.sweep import SweepSpec
from a2rl.store.locks import LocksUnsupported, sweep_lock

VERDICT = "fscheck.json"
PROBE_TIME_S = 300  # the probe job's time limit: it takes seconds once it runs
QUEUE_WAIT_S = 1800.0  # how long the probe job may wait in the queue before the check gives up
POLL_S = 0.1


def lock_fix(mount: Mount) -> str:
    """What to ask for where locks do not exclude across nodes, by file system type."""
    if mount.fstype == "lustre":
        fix = "ask the admins to mount it with the `flock` option (not `localflock`)"
    elif mount.fstype.startswith("nfs"):
        fix = "ask the admins to mount it without `nolock` or `local_lock=`"
    elif mount.fstype == "beegfs":
        fix = "ask the admins to set `tuneUseGlobalFileLocks = true` on the BeeGFS clients"
    else:
        fix = "ask the admins for a file system whose `flock` locks hold across nodes"
    return f"{fix}, or put the sweep on another directory (--sweep-dir)"


def mount_notes(mount: Mount) -> list[str]:
    """What the mount options alone say about locks (the probe decides; these explain)."""
    notes = []
    if mount.fstype.startswith("nfs") and mount.option("nolock") is not None:
        notes.append("mounted `nolock`: locks are node-local")
    if mount.fstype.startswith("nfs") and mount.option("local_lock") not in (None, "none"):
        notes.append(f"mounted `local_lock={mount.option('local_lock')}`: locks may be node-local")
    if mount.fstype == "lustre" and mount.option("localflock") is not None:
        notes.append("mounted `localflock`: locks are node-local")
    if mount.fstype == "lustre" and mount.option("flock") is None and mount.option("localflock") is None:
        notes.append("mounted without `flock`: flock fails (ENOSYS)")
    return notes


class FsVerdict(Record):
    """fscheck.json: the sweep directory's file system as checked from the launching node and a compute node."""

    directory: str
    fstype: str
    mount_point: str
    options: str
    executor: str  # local | slurm
    partition: str | None = None
    lock: str  # cross-node | one node (local executor) | node-local | unsupported: ...
    lag_s: float | None = None  # visibility lag seen here of a file renamed in on the compute node
    lease_s: float
    node: str | None = None  # the compute node that ran the probe
    probe_job: str | None = None
    differences: list[str] = []  # what the compute node sees otherwise than this node
    facts: NodeFacts | None = None  # the compute node's view (this node's with the local executor)
    notes: list[str] = []
    refused: str | None = None  # one line: cause and fix
    checked_at: float

    def line(self) -> str:
        """One line for `a2rl status` and `a2rl doctor`."""
        lag = "" if self.lag_s is None else f", visibility lag {self.lag_s:.1f} s"
        where = f" (probed on {self.node}, job {self.probe_job})" if self.node else ""
        return f"{self.fstype} at {self.mount_point} ({self.options}): locks {self.lock}{lag}{where}"


def partition_of(spec: SweepSpec) -> str | None:
    """The sweep's partition: its own, else its cluster profile's (None: the cluster's default)."""
    return spec.resources.partition or profile_of(spec).partition


def verdict_path(directory: Path) -> Path:
    return directory / VERDICT


def check_here(directory: Path) -> tuple[Mount, str | None]:
    """The mount, and why locks cannot be trusted even on this node (None: flock excludes here)."""
    mount = mount_of(directory)
    where = probe_dir(directory)
    where.mkdir(parents=True, exist_ok=True)
    lock = sweep_lock(where / "lock", timeout=0)
    try:
        lock.acquire()
    except LocksUnsupported as e:
        cause = e.__cause__ or "soft lock"
        return mount, (
            f"{directory} ({mount.fstype} at {mount.point}): file locks are unsupported ({cause}); a2rl never runs "
            f"its queue on a soft lock: {lock_fix(mount)}"
        )
    try:
        if try_lock(os.open(lock.lock_file, os.O_RDWR), close=True) != "held":
            return mount, f"{directory} ({mount.fstype}): flock does not exclude even on this node: {lock_fix(mount)}"
        return mount, None
    finally:
        lock.release()


def check(
    directory: Path,
    spec: SweepSpec,
    kind: str,
    folder: Path,
    *,
    schedulers: Schedulers | None = None,
    queue_wait_s: float = QUEUE_WAIT_S,
    clock: Callable[[], float] = time.monotonic,
) -> FsVerdict:
    """Check and record the verdict in `directory` (the sweep directory)."""
    mount, refused = check_here(directory)
    verdict = FsVerdict(
        directory=str(directory),
        fstype=mount.fstype,
        mount_point=mount.point,
        options=mount.options,
        executor=kind,
        partition=partition_of(spec),
        lock="one node (local executor)" if kind == "local" else "unsupported",
        lease_s=spec.grader.lease_s,
        notes=mount_notes(mount),
        refused=refused,
        checked_at=now(),
    )
    if kind == "local":
        verdict.facts = node_facts(directory, spec)
    elif refused is None:
        schedulers = schedulers or Schedulers(spec, folder, min_interval_s=2.0)
        verdict = _probe(verdict, directory, spec, schedulers[kind], mount, queue_wait_s, clock)
    verdict.dump(verdict_path(directory))
    return verdict


def _probe(
    verdict: FsVerdict,
    directory: Path,
    spec: SweepSpec,
    scheduler: Scheduler,
    mount: Mount,
    queue_wait_s: float,
    clock: Callable[[], float],
) -> FsVerdict:
    """Hold the lock while the probe job tries it; wait for its report; judge."""
    where = probe_dir(directory)
    token = secrets.token_hex(6)
    report_path = where / f"report-{token}.json"
    with sweep_lock(where / "lock", timeout=60):  # the probe job tries to take it meanwhile
        here = node_facts(directory, spec)
        try:
            job = scheduler.submit_one(
                Shape(f"a2rl-probe-{spec.name}", PROBE_TIME_S, 1, 0, 0.5, now=True),
                NodeProbe(str(directory), token, spec),
            )
        except QueueFull as e:
            return verdict.model_copy(
                update={
                    "refused": f"{directory}: the file-system probe job could not be queued ({e}): relaunch "
                    "when your jobs have ended"
                }
            )
        seen = _wait(report_path, job, scheduler, verdict.lease_s, queue_wait_s, clock)
    _until_gone(scheduler, job, clock)  # the runs' queue limits then count without it
    update: dict = {"probe_job": job}
    if isinstance(seen, str):
        update["refused"] = f"{directory}: {seen}"
        return verdict.model_copy(update=update)
    report, lag = seen
    report_path.unlink(missing_ok=True)  # read: the verdict holds what it said
    diffs = differences(here, report.facts)
    update.update(node=report.facts.host, lag_s=round(lag, 2), differences=diffs, facts=report.facts)
    if report.lock == "got it":
        update.update(
            lock="node-local",
            refused=f"{directory} ({mount.fstype} at {mount.point}, {mount.options}): a lock held on this node did "
            f"not stop compute node {report.facts.host} from taking it (node-local locks): {lock_fix(mount)}",
        )
    elif report.lock == "held":
        update["lock"] = "cross-node"
    else:
        update.update(
            lock=report.lock,
            refused=f"{directory} on compute node {report.facts.host}: file locks are {report.lock}; {lock_fix(mount)}",
        )
    if "refused" not in update and lag > verdict.lease_s:
        update["refused"] = (
            f"{directory} ({mount.fstype}): a file renamed in on {report.facts.host} took {lag:.0f} s to be seen "
            f"here, longer than the grader's lease ({verdict.lease_s:g} s): ask the admins for shorter attribute "
            f"caching (acdirmax/actimeo) or put the sweep on another directory (--sweep-dir)"
        )
    if "refused" not in update and diffs:
        update["refused"] = diffs[0] + (f" (and {len(diffs) - 1} more: {VERDICT})" if len(diffs) > 1 else "")
    return verdict.model_copy(update=update)


def _wait(
    report_path: Path,
    job: str,
    scheduler: Scheduler,
    lease_s: float,
    queue_wait_s: float,
    clock: Callable[[], float],
) -> tuple[ProbeReport, float] | str:
    """The probe's report and the lag until it was seen here, or why there is none (one line)."""
    start = clock()
    listed = ended = None
    state = "PENDING"
    asked = -1.0
    while True:
        t = clock()
        if listed is None and report_path.name in os.listdir(report_path.parent):
            listed = t
        if report_path.exists():  # the grader's way of looking: a stale negative cache says no here
            try:
                report = ProbeReport.load_or_none(report_path)
            except RecordError:  # not whole yet as seen from here
                report = None
            if report is not None:
                return report, t - min(x for x in (listed, ended, t) if x is not None)
        if t - asked >= 1.0:
            asked = t
            js = scheduler.states([job])[job]
            state = js.state
            if js.alive is False and ended is None:
                ended = t
        if listed is not None and t - listed > lease_s:
            return (
                f"a file renamed in on the compute node by probe job {job} was listed here but could not be opened "
                f"by its name for more than the grader's lease ({lease_s:g} s; cached lookups): ask the admins for "
                "shorter attribute caching (actimeo/acdirmax, lookupcache=positive) or put the sweep on another "
                "directory (--sweep-dir)"
            )
        if ended is not None and t - ended > lease_s:
            return (
                f"the probe job {job} ended ({state}) but its report was not seen here within the grader's lease "
                f"({lease_s:g} s): the job failed (see its log in the sweep's jobs/ folder) or the file system shows "
                "other nodes' files late; ask the admins, or put the sweep on another directory (--sweep-dir)"
            )
        if ended is None and listed is None and t - start > queue_wait_s:
            scheduler.cancel([job])
            return (
                f"the probe job {job} did not run within {queue_wait_s:.0f} s ({state}): try again when the "
                "partition has room (`--probe`)"
            )
        time.sleep(POLL_S)


def _until_gone(scheduler: Scheduler, job: str, clock: Callable[[], float], wait_s: float = 60.0) -> None:
    """Until the scheduler no longer counts the probe job as queued or running (at most `wait_s`)."""
    deadline = clock() + wait_s
    while scheduler.states([job])[job].alive is not False and clock() < deadline:
        time.sleep(0.5)


def checked(
    directory: Path, spec: SweepSpec, kind: str, folder: Path, *, probe: bool = False, **kw
) -> tuple[FsVerdict, bool]:
    """The kept verdict where it passed for this executor and partition (unless `probe`), else a new one;
    and whether it was reused."""
    kept = None if probe else FsVerdict.load_or_none(verdict_path(directory))
    partition = partition_of(spec)
    if kept is not None and kept.refused is None and kept.executor == kind and kept.partition == partition:
        return kept, True
    return check(directory, spec, kind, folder, **kw), False
