"""A busy cluster, for real (tools/slurm/up.sh): held jobs are not submitted twice, typed GPU requests reach
Slurm as gres, and a sweep larger than its QOS allows is submitted as room frees up, never failed."""

from __future__ import annotations

import re
import subprocess
import threading
import time

import pytest
import yaml

from a2rl.scheduling.base import make_scheduler
from a2rl.scheduling.launcher import open_sweep, submit_runs
from a2rl.store.results import RunResult
from a2rl.store.sweepdir import SweepDir
from conftest import a2rl, slurm_available, until, write_sweep

if not slurm_available():
    pytest.skip("no Slurm cluster (start one with tools/slurm/up.sh, or run tools/test.sh)", allow_module_level=True)

pytestmark = pytest.mark.slurm
QOS = "a2rl-test-qos"
HELD = {"sbatch": {"begin": "now+1hour"}}  # queued PENDING, never started
SLURM = {
    "executor": "slurm",
    "cluster": "local",
    "grader": {"poll_s": 0.1, "lease_s": 10, "idle_timeout_s": 300, "mem_gb": 1},
}


def queued(*job_ids: str) -> list[str]:
    arrays = sorted({j.split("_")[0] for j in job_ids})
    return subprocess.run(
        ["squeue", "-h", "-r", "-o", "%i", "-j", ",".join(arrays)], capture_output=True, text=True, check=True
    ).stdout.split()


def sacctmgr(*args: str) -> None:
    subprocess.run(["sacctmgr", "-i", *args], capture_output=True, text=True, check=True, timeout=60)


@pytest.fixture
def qos20():
    """Our own QOS (never root's or normal's limits): at most 20 queued jobs per user."""
    sacctmgr("add", "qos", QOS, "MaxSubmitJobsPerUser=20")
    try:
        sacctmgr("modify", "user", "root", "set", f"qos+={QOS}")
        yield QOS
    finally:
        subprocess.run(["scancel", "-q", QOS], capture_output=True, timeout=60)
        sacctmgr("modify", "user", "root", "set", f"qos-={QOS}")
        sacctmgr("delete", "qos", QOS)


@pytest.mark.slow  # 3-9 s: kept out of the fast layer
def test_relaunching_a_held_sweep_submits_nothing(tmp_path):
    spec = write_sweep(tmp_path, seeds=[0, 1], resources={"mem_gb": 0.1, **HELD}, **SLURM)
    a2rl("launch", str(spec), "--sweep-dir", str(tmp_path / "sd"), check=True)
    sweep = SweepDir(tmp_path / "sd")
    try:
        jobs = sorted(sweep.status(r.run_id).job_id for r in sweep.runs())
        (grader,) = yaml.safe_load((sweep.graders / "jobs.json").read_text())["job_ids"]
        (topup,) = yaml.safe_load(sweep.topup_jobs.read_text())["job_ids"]  # launched without --wait: it watches
        assert sorted(queued(*jobs)) == jobs
        proc = a2rl("launch", str(sweep.root), check=True)
        assert "submitted 0 of 2 runs and 0 grader(s)" in proc.stdout, proc.stdout
        assert sorted(sweep.status(r.run_id).job_id for r in sweep.runs()) == jobs
        assert sorted(queued(*jobs)) == jobs and queued(grader) == [grader]
        assert yaml.safe_load(sweep.topup_jobs.read_text())["job_ids"] == [topup] and queued(topup) == [topup]
    finally:
        a2rl("cancel", str(sweep.root), check=True)
    assert all(RunResult.load(sweep.result_path(r.run_id)).status == "failed" for r in sweep.runs())
    assert queued(grader, topup) == []  # the sweep's service jobs went with it


def test_gres_gpu_requests_reach_slurm_as_gres(tmp_path, monkeypatch):
    (tmp_path / "clusters").mkdir()
    (tmp_path / "clusters" / "gres.yaml").write_text(
        yaml.safe_dump(
            {
                "name": "gres",
                "partition": "debug",
                "gres_gpu": "gpu",
                "setup": ["source {a2rl_home}/slurm/job-setup.sh"],
            }
        )
    )
    monkeypatch.setenv("A2RL_CLUSTERS_PATH", str(tmp_path / "clusters"))
    spec = write_sweep(tmp_path, resources={"gpus": 2, "mem_gb": 0.1, **HELD}, **{**SLURM, "cluster": "gres"})
    a2rl("launch", str(spec), "--sweep-dir", str(tmp_path / "sd"), check=True)
    sweep = SweepDir(tmp_path / "sd")
    try:
        (run,) = sweep.runs()
        job_id = sweep.status(run.run_id).job_id
        job = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True, check=True).stdout
        assert "gres/gpu:2" in job or "gres:gpu:2" in job, job
        script = next(sweep.jobs.glob(f"*/{job_id}/{job_id}_submission.sh")).read_text()
        assert "#SBATCH --gres=gpu:2" in script and "--gpus-per-node" not in script
    finally:
        a2rl("cancel", str(sweep.root), check=True)


def test_a_submission_refused_for_qos_leaves_runs_deferred(tmp_path, qos20):
    """The queue fills between the capacity check and sbatch (another sweep of the same user): sbatch refuses
    the array, and its runs are deferred, not failed."""
    sweep, runs = open_sweep(
        write_sweep(tmp_path, seeds=list(range(5)), resources={"mem_gb": 0.1, "qos": qos20, **HELD}, **SLURM),
        tmp_path / "sd",
    )
    scheduler = make_scheduler("slurm", sweep.spec, sweep.jobs / "t")
    assert scheduler.capacity() == 20
    for _ in range(18):
        subprocess.run(
            ["sbatch", "-q", qos20, "--begin", "now+1hour", "-p", "debug", "--mem", "100M", "--wrap", "true"],
            capture_output=True,
            check=True,
            timeout=60,
        )
    assert submit_runs(sweep, scheduler, runs) == []  # 18 + 5 > 20
    assert [sweep.status(r.run_id).state for r in runs] == ["deferred"] * 5
    assert not any(sweep.result_path(r.run_id).exists() for r in runs)
    assert scheduler.capacity() == 0


@pytest.mark.slow
def test_40_runs_under_a_20_job_qos_all_finish(tmp_path, qos20):
    """More than twice what the QOS holds: the follower tops the queue up as runs end, never past the limit."""
    spec = write_sweep(tmp_path, seeds=list(range(40)), budget=120, resources={"mem_gb": 0.3, "qos": qos20}, **SLURM)
    most, done = [0], threading.Event()

    def watch() -> None:  # the most jobs ever queued in the QOS
        while not done.wait(1.0):
            out = subprocess.run(["squeue", "-h", "-r", "-q", qos20, "-o", "%i"], capture_output=True, text=True)
            most[0] = max(most[0], len(out.stdout.split()))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        proc = a2rl("launch", str(spec), "--sweep-dir", str(tmp_path / "sd"), "--wait", timeout=3600)
    finally:
        done.set()
        watcher.join()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "submitted 18 of 40 runs and 1 grader(s)" in proc.stdout  # the grader and the top-up job take 2 of 20
    assert "deferred (queue limit)" in proc.stdout
    sweep = SweepDir(tmp_path / "sd")
    statuses = [RunResult.load(sweep.result_path(r.run_id)).status for r in sweep.runs()]
    assert statuses == ["ok"] * 40
    assert 0 < most[0] <= 20


@pytest.mark.slow
def test_without_a_follower_the_topup_job_submits_deferred_runs(tmp_path, qos20):
    spec = write_sweep(tmp_path, seeds=list(range(25)), budget=120, resources={"mem_gb": 0.3, "qos": qos20}, **SLURM)
    proc = a2rl("launch", str(spec), "--sweep-dir", str(tmp_path / "sd"), check=True)
    assert "submitted 18 of 25 runs and 1 grader(s)" in proc.stdout, proc.stdout  # the top-up job has one place
    sweep = SweepDir(tmp_path / "sd")
    deadline = time.monotonic() + 1800  # liveness only
    while not all(sweep.result_path(r.run_id).exists() for r in sweep.runs()):
        assert time.monotonic() < deadline, "the deferred runs were never submitted"
        time.sleep(2)
    assert [RunResult.load(sweep.result_path(r.run_id)).status for r in sweep.runs()] == ["ok"] * 25
    log = "".join(p.read_text() for p in sweep.jobs.glob("*/*/*_0_log.out"))
    assert sum(int(n) for n in re.findall(r"top-up: submitted (\d+) deferred run", log)) == 7  # by the top-up job
    (topup,) = yaml.safe_load(sweep.topup_jobs.read_text())["job_ids"]
    until(lambda: not queued(topup), 300, "the top-up job to end")  # it ends once the sweep is done (every 30 s)


def test_the_capacity_plan_reads_the_qos_limit_and_maxarraysize_from_the_cluster(tmp_path, qos20):
    spec = write_sweep(tmp_path, seeds=list(range(25)), budget=120, resources={"mem_gb": 0.3, "qos": qos20}, **SLURM)
    plan = a2rl("validate", str(spec), check=True).stdout
    assert "capacity plan (slurm executor" in plan
    assert (
        "jobs: 25 runs as 1 array(s) of at most 1001 tasks (MaxArraySize), 1 grader(s), 1 top-up job (none with "
        "--wait unless runs are deferred): 27 jobs at once"
    ) in plan
    assert (
        f"queue limits: QOS {qos20} allows 20 queued jobs: 27 do not fit at once; 7 runs wait (deferred) and a "
        "top-up job submits them as jobs end"
    ) in plan  # as the launch does (test_without_a_follower_the_topup_job_submits_deferred_runs: 18 of 25)


def test_the_capacity_plan_reads_the_qos_gpu_limits(tmp_path):
    """GrpTRES and MaxTRESPerUser (gres/gpu) of the sweep's QOS, read from the cluster's own sacctmgr: 2 runs x 1
    GPU + 1 grader GPU under a QOS that lets 1 run."""
    qos = "a2rl-test-gpuqos"
    sacctmgr("add", "qos", qos, "GrpTRES=gres/gpu=1", "MaxTRESPerUser=gres/gpu=2")
    try:
        spec = write_sweep(
            tmp_path, seeds=[0, 1], resources={"gpus": 1, "qos": qos}, **{**SLURM, "grader": {"gpus": 1}}
        )
        plan = a2rl("validate", str(spec), check=True).stdout
    finally:
        sacctmgr("delete", "qos", qos)
    assert (
        f"GPU limits: QOS {qos} GrpTRES gres/gpu=1, MaxTRESPerUser gres/gpu=2: the sweep asks for 3 GPUs at once, 1 "
        "at most run together"
    ) in plan, plan
