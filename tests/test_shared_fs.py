"""The sweep directory on a shared file system, as a cluster's nodes see it: each node of the two-node test cluster
sees it through its own FUSE mount (bindfs) of one common directory, at the same path, with 30-s attribute, entry
and negative caching, as an NFS client caches; the launching node through a third. The test slurmds share this
machine's mount namespace (tools/slurm/node.sh), so each node's view lives in a mount namespace of its own held
by a `sleep` process, and only this test's jobs enter it: the test's cluster profile wraps the `srun` line of its
jobs (a `setup` shell function) in `enter`, which joins the namespace of the node the job runs on. Nothing else on
the shared cluster (daemons, other jobs) is touched.

- node-local locks (plain bindfs, as Lustre `localflock`): `a2rl doctor` refuses the file system and `a2rl launch`
  refuses in one line before anything but the probe job is queued;
- lock forwarding (`bindfs --enable-lock-forwarding`, as cluster-wide flock): a sweep with a grader on each
  node grades every submission exactly once.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from a2rl.records import RecordError
from a2rl.scheduling.fscheck import FsVerdict
from a2rl.store.results import RunResult
from a2rl.store.sweepdir import GraderBeat, SweepDir
from conftest import REPO, a2rl, slurm_available, until, write_sweep

if not slurm_available():
    pytest.skip("no Slurm cluster (tools/slurm/up.sh --nodes 2, or tools/test.sh)", allow_module_level=True)
if shutil.which("bindfs") is None or not Path("/dev/fuse").exists():
    pytest.skip("needs FUSE (/dev/fuse) and bindfs (tools/test.sh installs bindfs, fuse3)", allow_module_level=True)
if os.geteuid() != 0:
    pytest.skip("mounts a FUSE view per node in its own mount namespace: needs root", allow_module_level=True)

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
CACHING = "attr_timeout=30,entry_timeout=30,negative_timeout=30"
FAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1")  # Debian's libfaketime
NODES = ("vmn1", "vmn2")


def sinfo_nodes() -> list[str]:
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True, timeout=30).stdout
    return sorted(set(out.split()))


ENTER = """#!/bin/sh
# run "$@" in the mount namespace of the node this job runs on (its own view of the sweep directory), with that
# node's clocks shifted where faketime-<node> says by how much (libfaketime; its monotonic clock too: with
# FAKETIME_DONT_FAKE_MONOTONIC=1, libfaketime 0.9.10 makes Python's time.sleep fail with EINVAL)
if [ -s {base}/faketime-$SLURMD_NODENAME ]; then
  export LD_PRELOAD={faketime} FAKETIME="$(cat {base}/faketime-$SLURMD_NODENAME)"
fi
exec nsenter --mount=/proc/$(cat {base}/holder-$SLURMD_NODENAME)/ns/mnt --wd="$PWD" -- "$@"
"""
# the job's srun line is `srun <options> <python> -u -m submitit.core._submit <folder>`: enter before <python>
SRUN = (
    'srun() {{ local i=1; for a in "$@"; do [ "$a" = -u ] && break; i=$((i+1)); done; '
    'command srun "${{@:1:i-2}}" {base}/enter "${{@:i-1}}"; }}'
)


class NodeViews:
    """A common directory, a view of it per node (in a namespace of its own) and one here, at `view`."""

    def __init__(self, forwarding: bool):
        self.base = Path(f"/tmp/doctor-{secrets.token_hex(4)}")
        self.common, self.view = self.base / "common", self.base / "view"
        self.common.mkdir(parents=True)
        self.view.mkdir()
        self.opts = [*(["--multithreaded", "--enable-lock-forwarding"] if forwarding else []), "-o", CACHING]
        self.holders: dict[str, subprocess.Popen] = {}
        self.profile = f"fsnodes-{self.base.name}"

    def up(self) -> None:
        for node in NODES:  # before the view here, so the namespaces do not hold a copy of it
            holder = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sleep", "3600"])
            self.holders[node] = holder
            (self.base / f"holder-{node}").write_text(str(holder.pid))
        time.sleep(0.5)  # unshare has made the namespace
        for holder in self.holders.values():
            subprocess.run(
                ["nsenter", "-t", str(holder.pid), "-m", "bindfs", *self.opts, str(self.common), str(self.view)],
                check=True,
                timeout=30,
            )
        subprocess.run(["bindfs", *self.opts, str(self.common), str(self.view)], check=True, timeout=30)
        (self.base / "enter").write_text(ENTER.format(base=self.base, faketime=FAKETIME))
        (self.base / "enter").chmod(0o755)
        clusters = self.base / "clusters"
        clusters.mkdir()
        (clusters / f"{self.profile}.yaml").write_text(
            f"name: {self.profile}\npartition: debug\nsetup:\n  - source {REPO}/slurm/job-setup.sh\n"
            f"  - '{SRUN.format(base=self.base)}'\n"
        )

    def down(self) -> None:
        """Once this test's jobs are gone: the views unmounted (their bindfs processes end), the holders."""
        token = self.base.name.removeprefix("doctor-")

        def jobs_left() -> bool:
            q = subprocess.run(["squeue", "-h", "-o", "%j"], capture_output=True, text=True, timeout=60).stdout
            return any(token in name for name in q.split())

        if (self.view / "sd" / "sweep.json").exists():
            a2rl("cancel", str(self.view / "sd"), timeout=300)
        with contextlib.suppress(AssertionError):
            until(lambda: not jobs_left(), 300, "this test's jobs to end", every=2)
        for holder in self.holders.values():
            subprocess.run(["nsenter", "-t", str(holder.pid), "-m", "umount", str(self.view)], timeout=60)
            holder.send_signal(signal.SIGKILL)
            holder.wait()
        subprocess.run(["umount", str(self.view)], timeout=60)
        shutil.rmtree(self.base, ignore_errors=True)


@pytest.fixture
def views(monkeypatch):
    made: list[NodeViews] = []

    def make(forwarding: bool) -> NodeViews:
        v = NodeViews(forwarding)
        made.append(v)
        v.up()
        monkeypatch.setenv("A2RL_CLUSTERS_PATH", str(v.base / "clusters"))
        return v

    yield make
    for v in made:
        v.down()


def whole(record, path: Path):
    """A record read through this node's view: with 30-s attribute caching it may read torn (the size cached from
    before its last replacement) for up to 30 s."""

    def attempt():
        try:
            return record.load(path)
        except RecordError:
            return None

    return until(attempt, 90, f"{path} to read whole")


def jobs_named(names: set[str], since: str) -> list[str]:
    out = subprocess.run(
        ["sacct", "-n", "-X", "-P", "-o", "JobName", "-S", since], capture_output=True, text=True, timeout=60
    ).stdout
    q = subprocess.run(["squeue", "-h", "-o", "%j"], capture_output=True, text=True, timeout=60).stdout
    return [n for n in (out + q).split() if n in names]


@pytest.mark.sidebyside
def test_node_local_locks_doctor_refuses_and_launch_queues_nothing(tmp_path, views):
    v = views(forwarding=False)
    name = f"nl{v.base.name[-8:]}"
    # a lease longer than the views' 30-s caching: the probe's report is seen in time, its lock verdict judged
    grader = {"lease_s": 60, "mem_gb": 1}
    spec = write_sweep(tmp_path, name=name, executor="slurm", cluster=v.profile, resources={"mem_gb": 1}, grader=grader)
    since = time.strftime("%Y-%m-%dT%H:%M:%S")
    doc = a2rl("doctor", str(spec), "--sweep-dir", str(v.view / "sd"), timeout=600)
    assert doc.returncode == 1, doc.stdout + doc.stderr
    fs_line = next(line for line in doc.stdout.splitlines() if line.startswith("file system"))
    assert "refused" in fs_line and "node-local locks" in fs_line and "--sweep-dir" in fs_line
    verdict = FsVerdict.load(v.view / "sd" / "fscheck.json")
    assert verdict.lock == "node-local" and verdict.node in sinfo_nodes() and verdict.fstype == "fuse"

    out = a2rl("launch", str(spec), "--sweep-dir", str(v.view / "sd"), timeout=600)
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert out.returncode == 2 and len(errors) == 1, out.stderr
    assert "node-local locks" in errors[0] and "--sweep-dir" in errors[0]
    assert jobs_named({f"a2rl-{name}", f"a2rl-grader-{name}", f"a2rl-topup-{name}"}, since) == []
    assert jobs_named({f"a2rl-probe-{name}"}, since)  # the probes ran (doctor's, then the launch's)


@pytest.mark.sidebyside
def test_forwarded_locks_graders_on_both_nodes_clocks_4_minutes_apart_grade_every_submission_once(tmp_path, views):
    """Lock forwarding on, a grader on each node, one node's jobs 120 s ahead and the other's 120 s behind."""
    v = views(forwarding=True)
    shifts = dict(zip(sinfo_nodes(), ("+120", "-120")))
    for node, shift in shifts.items():
        (v.base / f"faketime-{node}").write_text(shift)
    t0 = time.time()
    spec = write_sweep(
        tmp_path,
        name=f"fw{v.base.name[-8:]}",
        executor="slurm",
        cluster=v.profile,
        agents=["submitter"],
        seeds=[0, 1],
        budget=30,
        resources={"mem_gb": 1},
        # 5 of a node's 8 CPUs each: the two graders cannot share a node
        grader={"workers": 2, "cpus": 5, "mem_gb": 1, "poll_s": 0.2, "idle_timeout_s": 300},
    )
    sd = v.view / "sd"
    out = a2rl("launch", str(spec), "--sweep-dir", str(sd), "--wait", timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    verdict = whole(FsVerdict, sd / "fscheck.json")
    assert verdict.refused is None and verdict.lock == "cross-node" and verdict.lag_s is not None
    assert "locks cross-node" in a2rl("status", str(sd), check=True).stdout
    sweep = SweepDir(sd)
    beats = {(b := whole(GraderBeat, p)).host: b for p in sweep.graders.glob("grader*.json")}
    assert set(beats) == set(sinfo_nodes())  # a grader on each node
    ahead, behind = (beats[node].started_at for node in shifts)
    assert ahead > t0 + 100 and behind < t0  # their clocks were shifted as asked
    results = {r.run_id: whole(RunResult, sweep.result_path(r.run_id)) for r in sweep.runs()}
    assert all(res.ungraded_submissions == 0 for res in results.values())
    submitted = sorted((run_id, seq) for run_id, res in results.items() for seq in range(1, res.submissions + 1))
    assert len(submitted) >= 4  # the submitter submits up to 3 per run in its 30 s
    entries = until(lambda: len(e := sweep.ledger.all_entries()) >= len(submitted) and e, 90, "the whole ledger")
    assert sorted((e.run_id, e.seq) for e in entries) == submitted  # every submission graded, none twice
    assert len({e.submission_id for e in entries}) == len(entries)
    assert not sweep.queue.pending_ids()
