"""A run's life cycle loses no work: its result is written before any wait and completed by the grader (a run
reaped as lost too); set-up is not charged to the budget; an interrupted run's workspace survives a requeue onto
a node whose scratch is empty."""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from pathlib import Path

import pytest

import a2rl.run.budget as budget_module
import a2rl.run.heartbeat as heartbeat_module
import a2rl.run.job as job_module
import a2rl.run.runsetup as runsetup_module
from a2rl.grading.daemon import GradingDaemon
from a2rl.run.job import AgentRun, wait_for_grading
from a2rl.run.workspace import Workspace, is_blank, restore_for_resume, save_for_resume
from a2rl.run.wrapup import KILL_MARGIN_S
from a2rl.scheduling.launcher import open_sweep
from a2rl.scheduling.local import LocalScheduler
from a2rl.store.ledger import LedgerEntry
from a2rl.store.results import RunResult, mark_lost, refresh_result
from a2rl.store.sweepdir import SweepDir
from conftest import a2rl, until, write_sweep
from fakes import FakeClock


# ---------------------------------------------------------------- the grading wait (fake clock)
def test_grading_wait_reacts_to_a_time_limit_signal_during_the_wait():
    """USR2 arrives 5 s into an hour's wait; the job is killed 30 s after it: the wait ends KILL_MARGIN_S before."""
    kill: list[float] = []
    clock = FakeClock()
    start = clock.now
    clock.at[start + 5] = lambda: kill.append(clock.now + 30)
    why = wait_for_grading(
        lambda: False,
        max_wait_s=3600,
        poll_s=1.0,
        kill_at=lambda: kill[0] if kill else None,
        terminated=threading.Event(),
        clock=clock,
        sleep=clock.sleep,
    )
    assert why == "time limit"
    assert kill[0] - KILL_MARGIN_S <= clock.now < kill[0] - KILL_MARGIN_S + 1.0


def test_grading_wait_ends_at_sigterm_at_max_wait_and_when_graded():
    term = threading.Event()
    clock = FakeClock()
    clock.at[clock.now + 3] = term.set
    assert (
        wait_for_grading(
            lambda: False,
            max_wait_s=3600,
            poll_s=1.0,
            kill_at=lambda: None,
            terminated=term,
            clock=clock,
            sleep=clock.sleep,
        )
        == "SIGTERM"
    )
    assert clock.now < 1000 + 3600
    clock = FakeClock()
    assert (
        wait_for_grading(
            lambda: False,
            max_wait_s=50,
            poll_s=1.0,
            kill_at=lambda: None,
            terminated=threading.Event(),
            clock=clock,
            sleep=clock.sleep,
        )
        == "max_wait_s"
    )
    assert 1050 <= clock.now < 1051
    clock = FakeClock()
    graded = iter([False, False, True])
    assert (
        wait_for_grading(
            lambda: next(graded),
            max_wait_s=50,
            poll_s=1.0,
            kill_at=lambda: None,
            terminated=threading.Event(),
            clock=clock,
            sleep=clock.sleep,
        )
        == "graded"
    )
    assert clock.now == 1002


# ---------------------------------------------------------------- results completed later
def new_sweep(tmp_path: Path, **fields) -> SweepDir:
    grader = {"poll_s": 0.05, "lease_s": 5, "idle_timeout_s": 120, **fields.pop("grader", {})}
    sweep, _ = open_sweep(write_sweep(tmp_path, grader=grader, **fields), tmp_path / "sd")
    return sweep


def test_mark_lost_lists_ungraded_submissions_and_a_refresh_folds_their_scores_in(tmp_path):
    sweep = new_sweep(tmp_path)
    (run,) = sweep.runs()
    queued = [sweep.queue.submit(run.run_id, f"output/v{i}", lambda sid: None, "test entry") for i in range(2)]
    sweep.ledger.record(
        LedgerEntry(
            submission_id=queued[0].submission_id,
            run_id=run.run_id,
            seq=1,
            submitted_at=queued[0].submitted_at,
            claimed_at=1.0,
            graded_at=2.0,
            status="scored",
            score=40.0,
            model_path="output/v0",
            task="echo",
            protocol="paper",
            evaluator_version=1,
            grader="g",
            attempt=1,
        )
    )
    lost = mark_lost(sweep, run, "job ended without a result: node lost")
    assert lost.status == "failed" and lost.submissions == 2 and lost.ungraded_submissions == 1
    assert lost.scores == [40.0] and lost.best == 40.0
    sweep.ledger.record(
        LedgerEntry(
            submission_id=queued[1].submission_id,
            run_id=run.run_id,
            seq=2,
            submitted_at=queued[1].submitted_at,
            claimed_at=3.0,
            graded_at=4.0,
            status="scored",
            score=70.0,
            model_path="output/v1",
            task="echo",
            protocol="paper",
            evaluator_version=1,
            grader="g",
            attempt=1,
        )
    )
    assert refresh_result(sweep, run.run_id) is not None
    done = RunResult.load(sweep.result_path(run.run_id))
    assert (done.status, done.failure_reason) == ("failed", "job ended without a result: node lost")
    assert done.scores == [40.0, 70.0] and done.best == 70.0 and done.ungraded_submissions == 0
    assert refresh_result(sweep, run.run_id) is None  # nothing left to fold in


@pytest.mark.sidebyside
@pytest.mark.slow
@pytest.mark.parametrize("lost", [False, True], ids=["job-result", "reaped-as-lost"])
def test_result_is_written_before_the_wait_and_the_grader_completes_it(tmp_path, monkeypatch, lost):
    """No grader runs: both submissions stay queued. The result exists before the job waits for scores; a
    grader started later completes it, also when the run was reaped as lost instead."""
    sweep = new_sweep(tmp_path, agents=[{"name": "submitter", "args": {"count": 2}}], grader={"max_wait_s": 1})
    (run,) = sweep.runs()
    seen_at_wait: list[RunResult | None] = []
    real_wait = job_module.wait_for_grading

    def wait(*args, **kw):
        seen_at_wait.append(RunResult.load_or_none(sweep.result_path(run.run_id)))
        return real_wait(*args, **kw)

    monkeypatch.setattr(job_module, "wait_for_grading", wait)
    ended = AgentRun(sweep, run.run_id).execute()
    (first,) = seen_at_wait
    assert first is not None and first.status == "ok" and first.submissions == first.ungraded_submissions == 2
    assert "2 submission(s) not graded yet" in first.failure_reason
    assert ended.ungraded_submissions == RunResult.load(sweep.result_path(run.run_id)).ungraded_submissions == 2
    if lost:
        sweep.result_path(run.run_id).unlink()
        mark_lost(sweep, run, "job ended without a result: node lost")
    assert GradingDaemon(sweep).run() == 0
    done = RunResult.load(sweep.result_path(run.run_id))
    assert done.scores == [10.0, 20.0] and done.best == 20.0 and done.baseline == 0.0
    assert done.ungraded_submissions == 0
    if lost:
        assert (done.status, done.failure_reason) == ("failed", "job ended without a result: node lost")
    else:
        assert (done.status, done.failure_reason) == ("ok", None)


@pytest.mark.sidebyside
@pytest.mark.slow
def test_a_fifo_in_code_at_the_budgets_end_delays_no_result(tmp_path, monkeypatch):
    """At the budget's end the saver's v1 is submitted for it, and its code snapshotted, while code/ holds a FIFO
    no one will ever write to: the snapshot lists it as skipped without opening it and the job writes its
    result (first without that submission, then with it)."""
    from a2rl.recording.snapshots import load_snapshots

    sweep = new_sweep(tmp_path, agents=["saver"], budget=20, grader={"max_wait_s": 120})
    (run,) = sweep.runs()
    ws = sweep.workspace(run.run_id)
    written: list[int] = []
    real_write = AgentRun._write_result

    def write(self, *args):
        result = real_write(self, *args)
        written.append(result.submissions)
        return result

    monkeypatch.setattr(AgentRun, "_write_result", write)

    def plant() -> None:
        until(lambda: (ws / "output" / "v1" / "config.json").exists(), timeout=300, what="v1 saved")
        os.mkfifo(ws / "code" / "pipe")

    planter = threading.Thread(target=plant, daemon=True)
    planter.start()
    ended: list[RunResult] = []
    job = threading.Thread(target=lambda: ended.append(AgentRun(sweep, run.run_id).execute()), daemon=True)
    job.start()
    log = sweep.run_dir(run.run_id) / "agent.log"  # the grader after the job's set-up: no two threads import torch
    until(lambda: log.exists() and "attempt 1 on" in log.read_text(), timeout=300, what="the agent's start")
    grader = threading.Thread(target=GradingDaemon(sweep).run, daemon=True)
    grader.start()
    job.join(600)  # a fail-safe: a job hung on the FIFO fails here instead of stalling the suite
    assert not job.is_alive(), "the job hung in its wrap-up"
    assert ended[0].status == "timeout" and written == [1, 2]
    grader.join(300)
    snap = load_snapshots(sweep.root, run.run_id)[-1]
    assert snap.seq == 2 and ("pipe", "fifo") in {(s.path, s.reason) for s in snap.skipped}
    assert [(e.seq, e.score) for e in sweep.ledger.entries(run.run_id)] == [(1, 10.0), (2, 25.0)]


# ---------------------------------------------------------------- set-up is not the agent's time
@pytest.mark.sidebyside
@pytest.mark.slow
def test_setup_is_recorded_apart_and_not_charged_to_the_budget(tmp_path, monkeypatch):
    """Creating the workspace "takes" 1000 s on the run's clock: setup_seconds has them, agent_seconds not. The
    run ends with no baseline recorded (no grader yet); the grader that starts later adds it."""

    class SlowSetupTime:
        offset = 0.0

        def monotonic(self) -> float:
            return time.monotonic() + self.offset

        def __getattr__(self, name):
            return getattr(time, name)

    clock = SlowSetupTime()
    real_create = runsetup_module.create_workspace

    def slow_create(*args, **kw):
        clock.offset += 1000.0
        return real_create(*args, **kw)

    monkeypatch.setattr(job_module, "time", clock)
    monkeypatch.setattr(heartbeat_module, "time", clock)  # the attempt's start (AgentRun.t0)
    monkeypatch.setattr(budget_module, "time", clock)
    monkeypatch.setattr(runsetup_module, "create_workspace", slow_create)  # set-up, before the clock
    sweep = new_sweep(tmp_path, grader={"max_wait_s": 1})
    (run,) = sweep.runs()
    result = AgentRun(sweep, run.run_id).execute()
    assert result.status == "ok", result.failure_reason
    assert result.setup_seconds >= 1000 and result.setup_seconds_by_attempt == [result.setup_seconds]
    assert result.agent_seconds < 1000
    status = sweep.status(run.run_id)
    assert status.setup_seconds == [result.setup_seconds] and status.agent_seconds == result.agent_seconds
    # no grader ran: the baseline is missing, until a grader starts, scores it and refreshes the result
    assert result.baseline is None and result.baseline_error == "no baseline was recorded"
    assert GradingDaemon(sweep).run() == 0
    assert RunResult.load(sweep.result_path(run.run_id)).baseline == 0.0


# ---------------------------------------------------------------- resuming on an empty scratch
def test_save_for_resume_caps_its_size_and_replaces_the_last_copy_whole(tmp_path):
    ws = Workspace(tmp_path / "ws")
    for rel, size in (("home/.agent/state.json", 10), ("code/train.py", 20), ("output/m/model.safetensors", 5000)):
        (ws.root / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws.root / rel).write_bytes(b"x" * size)
    (ws.root / "output" / "latest").symlink_to("m")
    dest = tmp_path / "resume"
    dest.mkdir()
    (dest / "stale").write_text("from an earlier interruption")
    copied, skipped = save_for_resume(ws, dest, max_bytes=1000)
    assert (copied, skipped) == (30, ["output/m/model.safetensors"])
    files = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file() or p.is_symlink())
    assert files == ["code/train.py", "home/.agent/state.json", "output/latest"]
    assert not list(tmp_path.glob("resume.*"))  # no partial or old copy left behind
    assert save_for_resume(ws, dest, max_bytes=10**6) == (5030, [])
    fresh = Workspace(tmp_path / "other-node")
    (fresh.root / "code").mkdir(parents=True)
    assert is_blank(fresh.root) and not is_blank(ws.root)
    restore_for_resume(fresh, dest)
    assert (fresh.root / "output" / "m" / "model.safetensors").read_bytes() == b"x" * 5000
    assert (fresh.root / "output" / "latest").readlink() == Path("m")
    assert (fresh.root / "home" / ".agent" / "state.json").exists()


@pytest.mark.sidebyside
@pytest.mark.slow
def test_an_interrupted_run_resumes_on_a_wiped_scratch_with_its_code_and_output(tmp_path):
    """The saver agent submits v0 and saves v1. SIGTERM its job, wipe the scratch (as a requeue onto another node
    finds it) and relaunch: v0 is not submitted again and v1 is auto-submitted at the budget's end."""
    scratch = tmp_path / "scratch"
    spec = write_sweep(tmp_path, agents=["saver"], budget=20, scratch_root=str(scratch))
    a2rl("launch", str(spec), "--sweep-dir", str(tmp_path / "sd"), check=True)
    sweep = SweepDir(tmp_path / "sd")
    (run,) = sweep.runs()
    ws = sweep.workspace(run.run_id)
    until(
        lambda: (ws / "output" / "v1" / "config.json").exists() and sweep.ledger.entries(run.run_id),
        timeout=300,
        what="v0 scored and v1 saved",
    )
    job = sweep.status(run.run_id).job_id
    os.kill(int(job), signal.SIGTERM)
    until(
        lambda: sweep.status(run.run_id).state == "interrupted" and LocalScheduler().states([job])[job].alive is False,
        timeout=300,
        what="the job to stop",
    )
    saved = sweep.resume_dir(run.run_id)
    assert (saved / "output" / "v0" / "config.json").exists() and (saved / "output" / "v1" / "config.json").exists()
    uncharged_before = sweep.status(run.run_id).uncharged_seconds
    assert uncharged_before > 0  # attempt 1 waited for v0's score
    shutil.rmtree(scratch)
    a2rl("launch", str(sweep.root), "--wait", check=True)
    result = until(
        lambda: (r := RunResult.load(sweep.result_path(run.run_id))).ungraded_submissions == 0 and r,
        timeout=300,
        what="the auto-submission's score",
    )
    assert result.status == "timeout"
    assert result.uncharged_seconds >= round(uncharged_before, 1)  # carried across the requeue, not restarted
    assert [(e.seq, e.score) for e in sweep.ledger.entries(run.run_id)] == [(1, 10.0), (2, 25.0)]
    assert "workspace restored from" in (sweep.run_dir(run.run_id) / "agent.log").read_text()
    assert not saved.exists()  # dropped once the run finished
