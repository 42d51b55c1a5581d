"""Against the real single-machine Slurm cluster (tools/slurm/up.sh; tools/test.sh starts it): job arrays,
GPU allocations, time limits, requeue, cancelled jobs and graders, MaxArraySize splitting."""

from __future__ import annotations

import json
import subprocess
from collections import Counter

import pytest

from a2rl.store.results import RunResult
from a2rl.store.sweepdir import SweepDir
from conftest import FIXTURES, a2rl, slurm_available, until, write_sweep

if not slurm_available():
    pytest.skip("no Slurm cluster (start one with tools/slurm/up.sh, or run tools/test.sh)", allow_module_level=True)

pytestmark = [pytest.mark.slurm, pytest.mark.slow]  # every test here launches a sweep
SLURM = {
    "executor": "slurm",
    "cluster": "local",
    "grader": {"poll_s": 0.1, "lease_s": 10, "idle_timeout_s": 300, "mem_gb": 2},
}


def results(sweep: SweepDir) -> list[RunResult]:
    return [RunResult.load(sweep.result_path(r.run_id)) for r in sweep.runs()]


@pytest.mark.sidebyside
def test_runs_are_job_arrays_each_with_its_own_gpu(tmp_path):
    spec = write_sweep(
        tmp_path,
        agents=[{"name": "submitter", "args": {"count": 2}}],
        seeds=[0, 1],
        resources={"cpus": 1, "gpus": 1, "mem_gb": 2},
        **SLURM,
    )
    proc = a2rl("launch", str(spec), "--sweep-dir", str(tmp_path / "sd"), "--wait", timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    sweep = SweepDir(tmp_path / "sd")
    assert not sweep.topup_jobs.exists()  # followed (--wait), every run fitting: no top-up job
    jobs = [sweep.status(r.run_id).job_id for r in sweep.runs()]
    assert len({j.split("_")[0] for j in jobs}) == 1 and sorted(j.split("_")[1] for j in jobs) == ["0", "1"]
    gpus = []
    for run in sweep.runs():
        env = json.loads((sweep.run_dir(run.run_id) / "env-1.json").read_text())
        assert env["executor"] == "slurm" and env["slurm"]["SLURM_ARRAY_JOB_ID"] == jobs[0].split("_")[0]
        assert len(env["cuda_visible_devices"].split(",")) == 1  # exactly its own allocation
        gpus.append(env["slurm"]["SLURM_JOB_GPUS"])
    assert all(len(g.split(",")) == 1 for g in gpus)
    for r in results(sweep):  # the same shape as a local run's result
        assert r.status == "ok" and r.scores == [10.0, 20.0] and r.improvement == 20.0


# not sidebyside: Slurm's time-limit signal races the agent's wrap-up, which a loaded machine can lose
def test_time_limit_wraps_up_and_auto_submits(tmp_path):
    """Budget 10 min, job limit 3 min: USR2 arrives before the limit; the agent is warned and stopped, its
    unsubmitted v1 is submitted for it, and the run ends as timeout with both scores."""
    spec = write_sweep(tmp_path, agents=["saver"], budget="10m", resources={"mem_gb": 2, "time_limit": "3m"}, **SLURM)
    a2rl("launch", str(spec), "--sweep-dir", str(tmp_path / "sd"), check=True)
    sweep = SweepDir(tmp_path / "sd")
    (run,) = sweep.runs()
    result = until(lambda: RunResult.load_or_none(sweep.result_path(run.run_id)), 400, "the run's result")
    result = until(
        lambda: (r := RunResult.load(sweep.result_path(run.run_id))).ungraded_submissions == 0 and r,
        120,
        "the auto-submission's score",
    )
    assert result.status == "timeout"
    assert result.scores == [10.0, 25.0] and result.best == 25.0
    log = (sweep.run_dir(run.run_id) / "agent.log").read_text()
    assert "wrap-up warning: the job's time limit is near" in log and "auto-submitting" in log
    assert "job time limit: stopping the agent" in log  # not the budget's end
    assert (sweep.workspace(run.run_id) / "WRAP_UP").exists()


# not sidebyside: its runs must end within a 60-s budget, which a loaded machine can run out (docs/development.md)
def test_a_cancelled_grader_is_replaced_by_the_topup_job_and_nothing_is_lost(tmp_path):
    """Launched without --wait, the sweep's only grader job cancelled mid-sweep (as a node lost or kill -9 would
    end it): submissions wait in the queue (their agents block, budget paused) until the top-up job, which a Slurm
    sweep without a follower always gets, starts a new grader; a relaunch starts no second grader or top-up job;
    every submission is graded once, and the top-up job ends by itself once the sweep is done."""
    spec = write_sweep(
        tmp_path,
        agents=[{"name": "submitter", "args": {"count": 3, "delay": 8}}],
        seeds=[0, 1],
        resources={"mem_gb": 2},
        **SLURM,
    )
    launch = a2rl("launch", str(spec), "--sweep-dir", str(tmp_path / "sd"), check=True)
    sweep = SweepDir(tmp_path / "sd")
    try:
        (topup,) = json.loads(sweep.topup_jobs.read_text())["job_ids"]
        assert f"top-up job {topup} watches the sweep" in launch.stdout, launch.stdout
        until(lambda: sweep.ledger.all_entries(), 120, "a first score")
        (grader,) = json.loads((sweep.graders / "jobs.json").read_text())["job_ids"]
        subprocess.run(["scancel", grader], check=True, timeout=30)
        until(lambda: not queued(grader), 60, "the grader job to end")
        until(lambda: sweep.queue.pending_ids(), 60, "a submission queued while no grader runs")
        graders = until(
            lambda: (ids := json.loads((sweep.graders / "jobs.json").read_text())["job_ids"])[1:] and ids,
            120,
            "the top-up job to start a new grader",
        )
        assert graders[0] == grader and len(graders) == 2
        again = a2rl("launch", str(sweep.root), check=True)
        assert "submitted 0 of 2 runs and 0 grader(s)" in again.stdout, again.stdout
        assert "top-up job" not in again.stdout, again.stdout
        assert json.loads(sweep.topup_jobs.read_text())["job_ids"] == [topup]
        until(lambda: all(RunResult.load_or_none(sweep.result_path(r.run_id)) for r in sweep.runs()), 300, "results")
        until(lambda: all(r.ungraded_submissions == 0 for r in results(sweep)), 120, "the last scores")
        entries = sweep.ledger.all_entries()
        assert len(entries) == 6 and len({e.submission_id for e in entries}) == 6
        for r in results(sweep):
            assert r.status == "ok" and r.scores == [10.0, 20.0, 30.0]
        log = "".join(p.read_text() for p in sweep.jobs.glob(f"*/{topup}/{topup}_0_log.out"))
        assert f"top-up: no grader was alive with work left; started grader job {graders[1]}" in log, log
        until(lambda: not queued(topup), 60, "the top-up job to end once the sweep is done")
        assert json.loads((sweep.graders / "jobs.json").read_text())["job_ids"] == graders
    finally:
        a2rl("cancel", str(sweep.root), timeout=300)  # what is left after a failure


def queued(job_id: str) -> bool:
    return bool(subprocess.run(["squeue", "-h", "-j", job_id], capture_output=True, text=True).stdout.strip())


@pytest.mark.sidebyside
def test_cancelled_agent_job_shows_failed(tmp_path):
    spec = write_sweep(tmp_path, agents=["sleeper"], budget=600, resources={"mem_gb": 2}, **SLURM)
    a2rl("launch", str(spec), "--sweep-dir", str(tmp_path / "sd"), check=True)
    sweep = SweepDir(tmp_path / "sd")
    (run,) = sweep.runs()
    until(lambda: (s := sweep.status(run.run_id)) and s.state == "running", 120, "the run to start")
    a2rl("cancel", str(sweep.root), "--run", run.run_id, check=True)

    def row() -> list[str]:
        out = a2rl("status", str(sweep.root), check=True).stdout
        return next(line.split(None, 2) for line in out.splitlines() if line.startswith(run.run_id))

    until(lambda: row()[1] == "failed", 300, "a2rl status to show the run failed", every=2)
    assert "Slurm state CANCELLED" in row()[2]
    result = RunResult.load(sweep.result_path(run.run_id))
    assert result.status == "failed" and "cancelled by `a2rl cancel`" in result.failure_reason
    a2rl("cancel", str(sweep.root), check=True)  # and the grader


def test_a_1000_run_grid_is_split_at_max_array_size(tmp_path, monkeypatch):
    monkeypatch.setenv("A2RL_CLUSTERS_PATH", str(FIXTURES / "clusters"))
    spec = write_sweep(
        tmp_path,
        seeds=list(range(1000)),
        executor="slurm",
        cluster="small-arrays",
        resources={"mem_gb": 0.1, "sbatch": {"begin": "now+1hour"}},
    )  # held: nothing runs
    a2rl("launch", str(spec), "--sweep-dir", str(tmp_path / "sd"), check=True, timeout=900)
    sweep = SweepDir(tmp_path / "sd")
    try:
        jobs = [sweep.status(r.run_id).job_id for r in sweep.runs()]
        sizes = Counter(j.split("_")[0] for j in jobs)
        assert sorted(sizes.values()) == [100, 300, 300, 300]
        for array in sizes:  # indices 0..n-1 within each array
            assert sorted(int(j.split("_")[1]) for j in jobs if j.startswith(array + "_")) == list(range(sizes[array]))
        queued = subprocess.run(
            ["squeue", "-h", "-r", "-o", "%i", "-j", ",".join(sizes)], capture_output=True, text=True, check=True
        ).stdout.split()
        assert sorted(queued) == sorted(jobs)
    finally:
        a2rl("cancel", str(sweep.root), check=True, timeout=300)
