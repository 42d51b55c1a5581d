"""The queue, grader and ledger under load and crashes: 10 concurrent submitters × 5 submissions while the
grading daemon is SIGKILLed twice in the middle of an evaluation and restarted. Every submission must be
recorded exactly once, with its own score."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from a2rl.scheduling.launcher import open_sweep
from a2rl.store.queue import Lease
from conftest import FIXTURES, write_sweep

SUBMITTERS, EACH = 10, 5  # 50 submissions, 5x the machine's cores submitting at once


def start_grader(sweep_dir: Path, log: Path, hold: Path | None = None) -> subprocess.Popen:
    env = {**os.environ, "A2RL_TEST_HOLD_GRADING": str(hold)} if hold else None
    return subprocess.Popen(
        [sys.executable, "-m", "a2rl", "grade", str(sweep_dir)],
        env=env,
        stdout=open(log, "a"),
        stderr=subprocess.STDOUT,
    )


def kill_mid_evaluation(grader: subprocess.Popen, sweep_dir: Path, hold: Path, timeout: float = 120) -> str:
    """SIGKILL the grader while it is evaluating a submission: with `hold` present, the echo evaluator it runs
    marks that it has started and never returns (tests/fixtures/tasks/echo/evaluator.py), so the lease it
    holds then is the submission cut off mid-evaluation. `hold` is removed for the next grader."""
    hold.write_text("")
    started = Path(f"{hold}.{grader.pid}")
    deadline = time.monotonic() + timeout
    while not started.exists():
        assert grader.poll() is None, f"the grader exited ({grader.returncode}) before evaluating"
        assert time.monotonic() < deadline, "the grader never started an evaluation"
        time.sleep(0.01)
    held = [
        lease
        for f in (sweep_dir / "queue" / "leases").glob("*.json")
        if (lease := Lease.load(f)).holder.endswith(f":{grader.pid}")
    ]
    assert len(held) == 1, held
    os.kill(grader.pid, signal.SIGKILL)
    grader.wait()
    hold.unlink()
    return held[0].submission_id


def recorded(sweep_dir: Path) -> int:
    return len(list((sweep_dir / "ledger").glob("*/*.json")))


def wait_recorded(sweep_dir: Path, n: int, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while recorded(sweep_dir) < n:
        assert time.monotonic() < deadline, f"only {recorded(sweep_dir)} recorded"
        time.sleep(0.1)


@pytest.mark.sidebyside
@pytest.mark.slow  # a whole sweep
def test_no_submission_lost_or_doubled_when_the_grader_is_killed(tmp_path, tiny_model):
    spec = write_sweep(
        tmp_path, seeds=list(range(SUBMITTERS)), grader={"poll_s": 0.02, "lease_s": 3, "idle_timeout_s": 600}
    )
    sweep, runs = open_sweep(spec, tmp_path / "sd")
    log, hold = tmp_path / "grader.log", tmp_path / "hold"
    grader = start_grader(sweep.root, log, hold)
    submitters = [
        subprocess.Popen(
            [sys.executable, str(FIXTURES / "stress_submitter.py"), str(sweep.root), run.run_id, str(EACH), str(i)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for i, run in enumerate(runs)
    ]
    killed = []
    try:
        wait_recorded(sweep.root, 15)
        killed.append(kill_mid_evaluation(grader, sweep.root, hold))
        grader = start_grader(sweep.root, log, hold)
        wait_recorded(sweep.root, 30)
        killed.append(kill_mid_evaluation(grader, sweep.root, hold))
        grader = start_grader(sweep.root, log, hold)
        outputs = [p.communicate(timeout=600)[0] for p in submitters]
    finally:
        grader.kill()
        grader.wait()
        for p in submitters:
            p.kill()

    answers = [json.loads(line) for out in outputs for line in out.splitlines()]
    assert len(answers) == SUBMITTERS * EACH
    assert all("error" not in a["answer"] for a in answers), [a for a in answers if "error" in a["answer"]][:3]
    entries = [json.loads(p.read_text()) for p in (sweep.root / "ledger").glob("*/*.json")]
    ids = [e["submission_id"] for e in entries]
    assert len(entries) == len(set(ids)) == SUBMITTERS * EACH
    assert set(ids) == {a["id"] for a in answers}
    by_id = {e["submission_id"]: e for e in entries}
    for a in answers:  # each score landed on its own submission
        assert by_id[a["id"]]["status"] == "scored" and by_id[a["id"]]["score"] == a["expected"]
        assert a["answer"]["score"] == a["expected"]
    # the submissions being graded when the grader died were claimed again and scored once
    for sid in killed:
        assert by_id[sid]["attempt"] >= 2
    assert not list((sweep.root / "queue" / "pending").glob("*.json"))
