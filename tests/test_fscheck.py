"""The sweep directory's file-system check (a2rl/scheduling/fscheck.py, node.py) and `a2rl doctor`'s rows
(scheduling/doctor.py), on this machine: /proc/mounts text, the local lock check, and the probe's verdicts
through two real bindfs views of one directory (node-local locks, and lock forwarding) with a scheduler that
runs the probe job in a thread against the other view. The Slurm side is tests/test_shared_fs.py."""

from __future__ import annotations

import errno
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from a2rl.scheduling import doctor, fscheck
from a2rl.scheduling.base import JobState, Scheduler
from a2rl.scheduling.fscheck import FsVerdict, check, checked, lock_fix, mount_notes, mount_of
from a2rl.scheduling.node import NodeFacts, NodeProbe, differences
from a2rl.spec.sweep import load_sweep
from conftest import a2rl, write_sweep

MOUNTS = """\
/dev/vda / ext4 rw,relatime 0 0
server:/export /home nfs4 rw,vers=4.2,local_lock=none 0 0
server:/scratch /scratch nfs rw,vers=3,nolock 0 0
10.0.0.1@tcp:/lfs /lustre/my\\040data lustre rw,localflock 0 0
10.0.0.1@tcp:/lfs2 /lustre2 lustre rw 0 0
"""


def test_mount_of_the_longest_mount_point_above_the_path():
    assert mount_of(Path("/home/u/sweeps"), MOUNTS).fstype == "nfs4"
    assert mount_of(Path("/homework"), MOUNTS).point == "/"  # a prefix of the name is not a parent
    m = mount_of(Path("/lustre/my data/s"), MOUNTS)
    assert (m.point, m.fstype, m.option("localflock")) == ("/lustre/my data", "lustre", "")
    assert mount_notes(mount_of(Path("/home/u"), MOUNTS)) == []
    assert mount_notes(mount_of(Path("/scratch/u"), MOUNTS)) == ["mounted `nolock`: locks are node-local"]
    assert "node-local" in mount_notes(m)[0] and "`flock` option" in lock_fix(m)
    assert "ENOSYS" in mount_notes(mount_of(Path("/lustre2/x"), MOUNTS))[0]
    assert "nolock" in lock_fix(mount_of(Path("/scratch"), MOUNTS))


@pytest.fixture
def spec(tmp_path):
    return load_sweep(write_sweep(tmp_path, isolation="none", grader={"lease_s": 2}))


def test_local_executor_checks_here_only_and_a_relaunch_reuses_the_verdict(tmp_path, spec):
    d = tmp_path / "sd"
    d.mkdir()
    v = check(d, spec, "local", tmp_path / "jobs")
    assert v.refused is None and v.lock == "one node (local executor)" and v.probe_job is None
    assert v.fstype == mount_of(d).fstype and v.facts.isolation == "none"
    kept, reused = checked(d, spec, "local", tmp_path / "jobs")
    assert reused and kept == FsVerdict.load(d / "fscheck.json")
    assert checked(d, spec, "local", tmp_path / "jobs", probe=True)[1] is False


def test_locks_unsupported_are_refused_in_one_line_with_the_fix(tmp_path, spec, monkeypatch):
    import filelock._native._unix as unix

    def no_flock(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(unix.fcntl, "flock", no_flock)
    v = check(tmp_path, spec, "slurm", tmp_path / "jobs")  # refused here: no probe job is submitted
    assert v.probe_job is None and v.refused is not None and "\n" not in v.refused
    assert "unsupported" in v.refused and "soft lock" in v.refused and "--sweep-dir" in v.refused


class ThreadScheduler(Scheduler):
    """Runs the probe job in a thread, against `view` (what the compute node would see), after `delay_s`."""

    kind = "slurm"

    def __init__(self, view: Path, delay_s: float = 0.0, ended_first: bool = False):
        super().__init__()
        self.view, self.delay_s, self.ended_first = view, delay_s, ended_first
        self.thread: threading.Thread | None = None

    def submit(self, shape, fn, args):
        probe = NodeProbe(str(self.view), fn.token, fn.spec)

        def job():
            time.sleep(self.delay_s)
            probe()

        self.thread = threading.Thread(target=job)
        self.thread.start()
        return ["7"]

    def states(self, job_ids):
        return {i: JobState(not self.ended_first and self.thread.is_alive(), state="X") for i in job_ids}

    def cancel(self, job_ids):
        pass


@pytest.fixture
def views(tmp_path):
    """mount(forwarding) → (common, a, b): two bindfs views of one directory, unmounted at the end."""
    if shutil.which("bindfs") is None or not Path("/dev/fuse").exists():
        pytest.skip("needs FUSE and bindfs (tools/test.sh installs bindfs and fuse3)")
    mounted = []

    def mount(forwarding: bool):
        common, a, b = tmp_path / "common", tmp_path / "a", tmp_path / "b"
        for p in (common, a, b):
            p.mkdir()
        opts = ["--multithreaded", "--enable-lock-forwarding"] if forwarding else []
        for view in (a, b):
            subprocess.run(["bindfs", *opts, str(common), str(view)], check=True, timeout=30)
            mounted.append(view)
        return common, a, b

    yield mount
    for view in mounted:
        subprocess.run(["fusermount", "-u", str(view)], timeout=30)


def test_node_local_locks_are_refused_naming_the_cause_and_the_fix(tmp_path, spec, views):
    _, a, b = views(forwarding=False)
    v = check(a, spec, "slurm", tmp_path / "jobs", schedulers={"slurm": ThreadScheduler(b)})
    assert v.lock == "node-local" and v.probe_job == "7" and v.node == v.facts.host
    assert "did not stop compute node" in v.refused and "--sweep-dir" in v.refused and "\n" not in v.refused
    assert FsVerdict.load(a / "fscheck.json").refused == v.refused
    assert checked(a, spec, "slurm", tmp_path / "jobs", schedulers={"slurm": ThreadScheduler(b)})[1] is False


def test_forwarded_locks_pass_and_the_lag_is_measured(tmp_path, spec, views):
    _, a, b = views(forwarding=True)
    v = check(a, spec, "slurm", tmp_path / "jobs", schedulers={"slurm": ThreadScheduler(b)})
    assert v.refused is None and v.lock == "cross-node" and v.lag_s is not None and v.lag_s >= 0
    assert "locks cross-node" in v.line()


def test_a_report_seen_later_than_the_lease_is_refused(tmp_path, spec):
    """The job has ended (as the scheduler says) but its report shows up only after the lease (2 s)."""
    d = tmp_path / "sd"
    d.mkdir()
    sched = ThreadScheduler(d, delay_s=3.0, ended_first=True)
    v = check(d, spec, "slurm", tmp_path / "jobs", schedulers={"slurm": sched})
    sched.thread.join()
    assert v.refused is not None and "grader's lease (2 s)" in v.refused


def test_differences_name_the_node_and_what_it_lacks():
    here = NodeFacts(
        host="login",
        fstype="nfs4",
        options="",
        isolation="bwrap",
        interpreters={"/opt/py": True},
        tasks={"arith": True},
        models={"m": True},
    )
    there = here.model_copy(update=dict(host="gpu7", isolation="refused: no bwrap", tasks={"arith": False}))
    lines = differences(here, there)
    assert len(lines) == 2 and all(line.startswith("compute node gpu7: ") for line in lines)
    assert "isolation" in lines[0] and "prepared task arith is missing there" in lines[1]
    assert differences(here, here) == []


def test_doctor_rows(spec):
    sinfo = "debug*|up|2|gpu:2\ngpu|up|1|gpu:a100:4(S:0)\ndown|down|1|(null)\n"
    assert doctor.partition_row(spec, sinfo) == doctor.Row(
        "partition and GPUs", "ok", "partition debug: up, 2 node(s), 4 GPU(s)"
    )
    gpu = spec.model_copy(update={"resources": spec.resources.model_copy(update={"partition": "down", "gpus": 1})})
    assert doctor.partition_row(gpu, sinfo).result == "refused"
    assert doctor.partition_row(gpu, "debug*|up|1|(null)\n").result == "refused"  # not found
    row = doctor.proxy_row({"HTTPS_PROXY": "http://me:secret@proxy:3128"}, None, "api")
    assert row.result == "ok" and "secret" not in row.detail and "proxy:3128" in row.detail
    there = NodeFacts(host="n1", fstype="x", options="", isolation="bwrap")
    assert doctor.proxy_row({"HTTPS_PROXY": "http://p:1"}, there, "api").result == "warning"
    assert doctor.exit_code([doctor.Row("a", "ok", ""), doctor.Row("b", "warning", "")]) == 0
    assert doctor.exit_code([doctor.Row("a", "refused", "")]) == 1


def test_a2rl_doctor_on_the_local_executor_prints_one_line_per_check(tmp_path):
    spec = write_sweep(tmp_path, isolation="none")
    out = a2rl("doctor", str(spec), "--sweep-dir", str(tmp_path / "sd"), timeout=120)
    assert out.returncode == 0, out.stderr
    rows = {line.split()[0] for line in out.stdout.splitlines()[3:-1]}
    assert {"Slurm", "file", "isolation", "proxy", "models"} <= rows
    assert FsVerdict.load(tmp_path / "sd" / "fscheck.json").lock == "one node (local executor)"
    assert fscheck.VERDICT in out.stdout.splitlines()[-1]


def test_doctor_slurm_rows_from_the_clusters_answers(spec, monkeypatch):
    """sinfo answers, sacct does not (no accounting), sacctmgr does not: warnings, not refusals; sinfo failing is
    a refusal."""
    import subprocess as sp

    from a2rl.scheduling.slurm import SlurmScheduler

    monkeypatch.setattr(doctor.shutil, "which", lambda c: f"/usr/bin/{c}")
    answers = {"sinfo": (0, "debug*|up|2|gpu:2\n"), "sacct": (1, ""), "sacctmgr": (1, "")}

    def runner(argv):
        rc, out = answers[argv[0]]
        return sp.CompletedProcess(argv, rc, out, "slurm_load_partitions: Unable to contact slurm controller")

    rows = doctor.slurm_rows(spec, [], SlurmScheduler(spec, runner=runner), runner)
    assert [(r.check, r.result) for r in rows] == [
        ("Slurm reachable", "warning"),
        ("partition and GPUs", "ok"),
        ("QOS and association limits", "warning"),
        ("GPU limits", "ok"),
    ]
    answers["sinfo"] = (1, "")
    (row,) = doctor.slurm_rows(spec, [], SlurmScheduler(spec, runner=runner), runner)
    assert row.result == "refused" and "Unable to contact slurm controller" in row.detail
    monkeypatch.setattr(doctor.shutil, "which", lambda c: None)
    assert "not on PATH" in doctor.slurm_rows(spec, [], SlurmScheduler(spec, runner=runner), runner)[0].detail


def test_the_probe_job_runs_now_even_where_the_sweeps_jobs_are_held(spec):
    from a2rl.scheduling.base import Shape
    from a2rl.scheduling.slurm import SlurmScheduler

    held = spec.model_copy(
        update={"resources": spec.resources.model_copy(update={"sbatch": {"begin": "now+1hour", "reservation": "r"}})}
    )
    s = SlurmScheduler(held)
    assert s.parameters(Shape("a2rl-t", 60, 1, 0, 1))["slurm_additional_parameters"]["begin"] == "now+1hour"
    assert s.parameters(Shape("a2rl-probe-t", 60, 1, 0, 1, now=True))["slurm_additional_parameters"] == {
        "reservation": "r"
    }
