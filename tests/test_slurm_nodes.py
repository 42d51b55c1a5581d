"""Against the real two-node cluster (tools/slurm/up.sh --nodes 2; tools/test.sh starts it): each node a slurmd
in its own network namespace with its own hostname and node-local TMPDIR, the sweep directory shared. A run
requeued onto the other node, and the sweep's infrastructure failing under it (chaos): a run's job killed; a
grader job killed mid-evaluation, the --wait follower killed, slurmctld restarted and a node's slurmd stopped
for a minute, in one sweep (to keep the suite's time)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from a2rl.store.queue import Lease
from a2rl.store.results import RunResult, load_result
from a2rl.store.sweepdir import SweepDir
from conftest import REPO, a2rl, slurm_available, until, write_sweep

if not slurm_available():
    pytest.skip(
        "no Slurm cluster (start one with tools/slurm/up.sh --nodes 2, or run tools/test.sh)", allow_module_level=True
    )


def nodes() -> list[str]:
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True, timeout=30).stdout
    return sorted(set(out.split()))


if len(nodes()) < 2:
    if os.environ.get("A2RL_SLURM") == "1":  # tools/test.sh brings up two nodes: fewer is its failure
        raise RuntimeError(f"A2RL_SLURM=1 but the cluster has {len(nodes())} node(s), these tests need 2")
    pytest.skip("the Slurm cluster has one node (tools/slurm/up.sh --nodes 2 makes two)", allow_module_level=True)

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
SLURM_DIR = Path(os.environ.get("SLURM_LOCAL_DIR", "/tmp/slurm-local"))
# daemons restarted by a test outlive it: not the test's environment (nor its mark, tests/conftest.py)
DAEMON_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "SLURM_LOCAL_DIR": str(SLURM_DIR)}
SLURM = {
    "executor": "slurm",
    "cluster": "local",
    "scratch_root": "$TMPDIR",  # node-local: a run moved to the other node finds no workspace there
    "grader": {"poll_s": 0.1, "lease_s": 10, "idle_timeout_s": 300, "mem_gb": 1},
}


def squeue(job_id: str) -> str:
    return subprocess.run(["squeue", "-h", "-j", job_id], capture_output=True, text=True, timeout=60).stdout.strip()


def scontrol(*args: str) -> None:
    subprocess.run(["scontrol", *args], check=True, timeout=60, capture_output=True)


def result_with_all_scores(sweep: SweepDir, run_id: str, timeout: float = 300) -> RunResult:
    until(lambda: RunResult.load_or_none(sweep.result_path(run_id)), timeout, f"{run_id}'s result")
    return until(
        lambda: (r := RunResult.load(sweep.result_path(run_id))).ungraded_submissions == 0 and r,
        120,
        f"{run_id}'s last score",
    )


def graded_once(sweep: SweepDir) -> list:
    """Every submission of the sweep graded exactly once, and nothing left in the queue (a grader drops a
    submission from it just after recording its score)."""
    until(lambda: not sweep.queue.pending_ids(), 60, "the queue to empty")
    entries = sweep.ledger.all_entries()
    assert len({e.submission_id for e in entries}) == len(entries)
    return entries


@pytest.fixture
def sd(tmp_path):
    """The sweep directory; its jobs (the grader's included) are cancelled at the end, pass or fail."""
    yield tmp_path / "sd"
    if (tmp_path / "sd").is_dir():
        a2rl("cancel", str(tmp_path / "sd"), timeout=300)


def test_requeue_moves_a_run_to_the_other_node_with_its_workspace_and_budget(tmp_path, sd):
    """The saver submits v0 and saves v1 on node A. A drained and the job requeued (Slurm's restart count 1), it
    restarts on node B, whose scratch lacks the workspace: restored from resume/, v0 is not submitted again, the
    budget (used and uncharged time) continues, and v1 is auto-submitted at its end."""
    spec = write_sweep(tmp_path, agents=["saver"], budget=40, resources={"mem_gb": 1}, **SLURM)
    a2rl("launch", str(spec), "--sweep-dir", str(sd), check=True)
    sweep = SweepDir(sd)
    (run,) = sweep.runs()
    log = sweep.run_dir(run.run_id) / "agent.log"
    until(lambda: sweep.ledger.entries(run.run_id), 180, "the first scored submission")
    until(lambda: "working" in log.read_text(errors="replace"), 120, "v1 saved")
    first = sweep.status(run.run_id)
    scontrol("update", f"nodename={first.host}", "state=drain", "reason=a2rl-test")
    try:
        scontrol("requeue", first.job_id)
        # the requeued job starts ~15 s later (cred_expire): the interrupted status is there to read meanwhile
        stopped = until(
            lambda: (s := sweep.status(run.run_id)).state == "interrupted" and s, 120, "the interrupted status"
        )
        result_with_all_scores(sweep, run.run_id)
        # the job writes its result before it auto-submits v1 (run/job.py), then again: wait for v1's score
        until(lambda: len(RunResult.load(sweep.result_path(run.run_id)).scores) == 2, 120, "v1's score")
        result = result_with_all_scores(sweep, run.run_id)
    finally:
        scontrol("update", f"nodename={first.host}", "state=resume")
    second = json.loads((sweep.run_dir(run.run_id) / "env-2.json").read_text())
    assert first.host in nodes() and second["host"] in nodes() and second["host"] != first.host
    assert second["slurm"]["SLURM_RESTART_COUNT"] == "1"
    assert sweep.status(run.run_id).attempt == 2
    assert "workspace restored from" in log.read_text()  # the other node's scratch did not have it
    assert stopped.uncharged_seconds > 0  # attempt 1 waited for v0's score
    assert result.status == "timeout" and result.agent_seconds >= 40
    assert result.uncharged_seconds >= round(stopped.uncharged_seconds, 1)  # carried, not restarted
    assert [(e.seq, e.score) for e in graded_once(sweep)] == [(1, 10.0), (2, 25.0)]  # v0 once, v1 auto
    assert not sweep.resume_dir(run.run_id).exists()
    left = [
        int(n)
        for n in re.findall(r"^\[a2rl [\d:]+\] attempt \d .*\(budget left (\d+) s of 40 s\)$", log.read_text(), re.M)
    ]
    assert len(left) == 2 and left[1] < left[0]  # the clock resumed from what attempt 1 used, it did not restart


def kill_job(job_id: str) -> None:
    """kill -9 of every process of the job at once (an OOM kill, a node's processes lost), slurmstepd aside: the
    job gets no SIGTERM to save anything by."""
    raw = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%A"], capture_output=True, text=True, check=True)
    mark = f"SLURM_JOB_ID={raw.stdout.strip()}".encode()
    pids = []
    for env in Path("/proc").glob("[0-9]*/environ"):
        try:
            if mark in env.read_bytes().split(b"\0"):
                pids.append(int(env.parent.name))
        except OSError:  # gone, or not ours to read
            pass
    assert pids, f"no process of job {job_id}"
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_a_runs_job_killed_is_lost_keeps_its_scores_and_is_retried_on_request(tmp_path, sd):
    """kill -9 of every process of one run's job mid-sweep: the follower marks it failed (lost) with the scores
    it earned, the other run is untouched; `--retry-failed` runs it again."""
    spec = write_sweep(
        tmp_path,
        agents=[{"name": "submitter", "args": {"count": 3, "delay": 6}}],
        seeds=[0, 1],
        resources={"mem_gb": 1},
        **SLURM,
    )
    a2rl("launch", str(spec), "--sweep-dir", str(sd), check=True)
    sweep = SweepDir(sd)
    victim, other = sweep.runs()
    until(lambda: sweep.ledger.entries(victim.run_id), 180, "the victim's first score")
    job = sweep.status(victim.run_id).job_id
    kill_job(job)
    proc = a2rl("launch", str(sweep.root), "--wait", timeout=600)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # a run failed
    lost = RunResult.load(sweep.result_path(victim.run_id))
    assert lost.status == "failed" and "job ended without a result" in lost.failure_reason
    assert lost.scores and lost.scores == [e.score for e in sweep.ledger.entries(victim.run_id)]
    assert result_with_all_scores(sweep, other.run_id).scores == [10.0, 20.0, 30.0]
    # the grader leaves once every run has a result; a relaunch in that moment finds it alive and starts none,
    # and --wait does not replace it (issue 26's grader autoscale): retry once it has gone, as a user would later
    (grader,) = json.loads((sweep.graders / "jobs.json").read_text())["job_ids"]
    until(lambda: not squeue(grader), 300, "the grader to leave")
    proc = a2rl("launch", str(sweep.root), "--retry-failed", "--wait", timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    retried = result_with_all_scores(sweep, victim.run_id)
    assert retried.status == "ok" and retried.scores[-3:] == [10.0, 20.0, 30.0]
    starts = re.findall(
        r"attempt (\d) on .*\(budget left (\d+) s of 60 s\)", (sweep.run_dir(victim.run_id) / "agent.log").read_text()
    )
    assert starts == [("1", "60"), ("1", "60")]  # the retry starts over: a new first attempt, the whole budget
    assert list(sweep.run_dir(victim.run_id).glob("result.failed-*.json"))  # the lost result is kept
    graded_once(sweep)


def restart_slurmctld() -> None:
    """Stop slurmctld (SIGTERM, as an admin's restart does) and start it again from its saved state."""
    pid = int((SLURM_DIR / "run" / "slurmctld.pid").read_text())
    os.kill(pid, signal.SIGTERM)
    until(lambda: not Path(f"/proc/{pid}").exists(), 60, "slurmctld to stop")
    subprocess.run(["/usr/sbin/slurmctld"], check=True, timeout=60, env=DAEMON_ENV)
    until(lambda: subprocess.run(["sinfo", "-h"], capture_output=True).returncode == 0, 60, "slurmctld to answer")


def node_sh(action: str, node: str) -> None:
    subprocess.run(["bash", str(REPO / "tools/slurm/node.sh"), action, node], check=True, timeout=60, env=DAEMON_ENV)


def kill_grader_mid_evaluation(sweep: SweepDir, hold: Path) -> tuple[str, str]:
    """kill -9 of the grader job that is evaluating a submission: with `hold` present the echo evaluator marks
    that it started (`hold`.PID) and never returns (tests/fixtures/tasks/echo/evaluator.py); `hold` goes at
    once, so the other grader's evaluations run on. Returns the killed holder and the submission it leased."""
    hold.write_text("")
    started = until(lambda: list(hold.parent.glob(f"{hold.name}.*")), 120, "a grader mid-evaluation")
    hold.unlink()
    (pid,) = (int(p.suffix[1:]) for p in started)
    (lease,) = (
        lease
        for f in (sweep.root / "queue" / "leases").glob("*.json")
        if (lease := Lease.load(f)).holder.endswith(f":{pid}") and not lease.released
    )
    env = dict(v.split("=", 1) for v in Path(f"/proc/{pid}/environ").read_text().split("\0") if "=" in v)
    kill_job(env["SLURM_JOB_ID"])
    return lease.holder, lease.submission_id


@pytest.mark.skipif(os.geteuid() != 0, reason="restarts slurmctld and a slurmd: needs root")
def test_grader_and_follower_killed_slurmctld_restarted_and_a_slurmd_down_for_a_minute_lose_nothing(tmp_path, sd):
    """One sweep of two graders through four infrastructure failures, in turn: one grader job killed (-9) in the
    middle of an evaluation, the --wait follower killed (-9), slurmctld restarted, the slurmd of a node with a
    run on it stopped for a minute (the run ends meanwhile). The other grader takes the dead one's lease once it
    expires (lease_s) and grades that submission; a relaunch follows again without submitting any run; the runs
    finish in their first jobs, every submission graded once. (Two graders: the one left takes over; a dead
    last grader is the relaunch's to replace.)"""
    spec = write_sweep(
        tmp_path,
        agents=[{"name": "submitter", "args": {"count": 3, "delay": 10}}],
        seeds=[0, 1],
        resources={"mem_gb": 1},
        **{**SLURM, "grader": {**SLURM["grader"], "workers": 2}},
    )
    hold = tmp_path / "hold"  # the graders inherit the follower's environment (sbatch --export=ALL)
    follower = subprocess.Popen(
        [sys.executable, "-m", "a2rl", "launch", str(spec), "--sweep-dir", str(sd), "--wait"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=REPO,
        env={**os.environ, "A2RL_TEST_HOLD_GRADING": str(hold)},
    )
    sweep = SweepDir(sd)
    until(lambda: sd.is_dir() and sweep.ledger.all_entries(), 180, "a first score")
    dead, cut_off = kill_grader_mid_evaluation(sweep, hold)
    follower.send_signal(signal.SIGKILL)
    follower.wait(timeout=30)
    jobs = {r.run_id: sweep.status(r.run_id).job_id for r in sweep.runs()}
    restart_slurmctld()
    node = next(s.host for r in sweep.runs() if (s := sweep.status(r.run_id)).state == "running")
    node_sh("stop", node)
    try:
        time.sleep(60)  # the runs end while it is down: their slurmstepd tells slurmctld
    finally:
        node_sh("start", node)
    proc = a2rl("launch", str(sd), "--wait", timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not re.search(r"submitted [1-9]", proc.stdout), proc.stdout
    assert {r.run_id: sweep.status(r.run_id).job_id for r in sweep.runs()} == jobs  # the same jobs, no others
    for r in sweep.runs():
        result = result_with_all_scores(sweep, r.run_id)
        assert result.status == "ok" and result.scores == [10.0, 20.0, 30.0]
        assert load_result(sweep, r.run_id).scores == result.scores  # signed: it verifies (None otherwise)
        assert sweep.status(r.run_id).attempt == 1
    assert len(graded_once(sweep)) == 6
    retaken = sweep.ledger.get(cut_off)
    assert retaken.status == "scored" and retaken.attempt == 2 and retaken.grader != dead


@contextlib.contextmanager
def small_file_system(where: Path, size_mb: int):
    """A tmpfs of `size_mb` at `where`: the nodes' slurmds live in their own network namespaces but share this
    mount namespace (tools/slurm/node.sh), so both nodes see it as the shared file system."""
    where.mkdir()
    try:
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(where)],
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        )
    except subprocess.CalledProcessError as e:
        pytest.skip(f"cannot mount a small tmpfs for the sweep directory: {e.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True, timeout=60)


def fill(fs: Path) -> Path:
    """A ballast file that takes every free byte of `fs`."""
    ballast = fs / "ballast"
    fd = os.open(ballast, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        for chunk in (1 << 16, 512):  # then the last partial pages
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * chunk)
    finally:
        os.close(fd)
    return ballast


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a small tmpfs for the sweep directory: needs root")
def test_the_shared_file_system_full_for_half_a_minute_loses_nothing(tmp_path):
    """The sweep directory's file system (a 64 MB tmpfs both nodes see) fills up mid-sweep for 25 s, then has
    room again: the writes that met it waited for room and were done then (records.while_full), so the sweep
    ends as an undisturbed one does: every run ok with its three scores, every submission graded once, every
    record whole, no temporary file left, and the logs say it in a line, not a traceback."""
    with small_file_system(tmp_path / "fs", 64) as fs:
        sd, out = fs / "sd", tmp_path / "follower.out"
        spec = write_sweep(
            tmp_path,
            agents=[{"name": "submitter", "args": {"count": 3, "delay": 10}}],
            seeds=[0, 1],
            resources={"mem_gb": 1},
            **SLURM,
        )
        with open(out, "w") as f:  # the user follows the sweep with --wait throughout
            follower = subprocess.Popen(
                [sys.executable, "-m", "a2rl", "launch", str(spec), "--sweep-dir", str(sd), "--wait"],
                stdout=f,
                stderr=subprocess.STDOUT,
                cwd=REPO,
            )
        try:
            sweep = SweepDir(sd)
            until(lambda: sd.is_dir() and sweep.ledger.all_entries(), 180, "a first score")
            jobs = {r.run_id: sweep.status(r.run_id).job_id for r in sweep.runs()}
            ballast = fill(fs)
            time.sleep(25)
            ballast.unlink()
            assert follower.wait(timeout=600) == 0, out.read_text()
            assert "Traceback" not in out.read_text(), out.read_text()
            (grader,) = json.loads((sweep.graders / "jobs.json").read_text())["job_ids"]  # it did not die
            assert {r.run_id: sweep.status(r.run_id).job_id for r in sweep.runs()} == jobs
            for r in sweep.runs():
                result = result_with_all_scores(sweep, r.run_id)
                assert result.status == "ok" and result.scores == [10.0, 20.0, 30.0], result
                assert load_result(sweep, r.run_id).scores == result.scores  # signed: it verifies (None otherwise)
            assert [e.status for e in graded_once(sweep)] == ["scored"] * 6
            for path in sd.rglob("*.json"):
                json.loads(path.read_text())  # whole, every one
            assert not [p for p in sd.rglob("*") if p.name.endswith((".tmp", ".partial")) or ".blob." in p.name]
            logs = "".join(p.read_text(errors="replace") for p in (sd / "jobs").rglob("*.err"))
            assert "for space" in logs, logs  # a write met the full file system, waited, and was done
            assert "Traceback" not in logs, logs
        finally:
            if follower.poll() is None:
                follower.kill()
            if sd.is_dir():
                a2rl("cancel", str(sd), timeout=300)
