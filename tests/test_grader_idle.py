"""The grader's idle limit counts only while no run of the sweep is at work: a run that trains past
`idle_timeout_s` without submitting still finds its grader (a driver server follows the same rule). Fake time."""

from __future__ import annotations

from a2rl.grading.daemon import GradingDaemon
from a2rl.records import now
from a2rl.scheduling.launcher import open_sweep
from a2rl.store.sweepdir import STALE_S, RunStatus
from conftest import write_sweep
from fakes import FakeClock

IDLE_S = 600.0


def never_left():
    raise AssertionError("the grader did not leave when idle with no run at work")


def test_the_grader_waits_while_a_run_is_at_work_and_leaves_idle_after(tmp_path, tiny_model):
    sweep, (run,) = open_sweep(
        write_sweep(tmp_path, grader={"poll_s": 5.0, "lease_s": 5, "idle_timeout_s": IDLE_S}), tmp_path / "sd"
    )
    status = sweep.run_dir(run.run_id) / "status.json"
    RunStatus(run_id=run.run_id, state="running", heartbeat_at=now()).dump(status)
    grader = GradingDaemon(sweep)
    clock = FakeClock(start=0.0)
    grader.sleep, grader.clock = clock.sleep, clock
    went_quiet = 3 * IDLE_S  # the run trains, silent, for three idle limits; then its job dies unseen
    clock.at[went_quiet] = lambda: RunStatus(run_id=run.run_id, state="running", heartbeat_at=now() - 2 * STALE_S).dump(
        status
    )
    clock.at[went_quiet + 5 * IDLE_S] = never_left
    assert grader.run() == 0
    # idle counted from the last poll that saw the run at work (within poll_s of its going quiet)
    assert went_quiet - 5.0 + IDLE_S < clock.now <= went_quiet + IDLE_S + 5.0
    assert grader._note == f"idle for {IDLE_S:g} s with no run at work"
