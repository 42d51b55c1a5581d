"""The grader's idle limit counts only while no run of the sweep is at work, queued or deferred: a run that trains
past `idle_timeout_s` without submitting, waits in the scheduler's queue (or requeued) or for room under a limit,
still finds its grader (a driver server
follows the same rule). With workers auto, a grader asks its pool for another when a submission has waited
scale_wait_s, and an extra one idle for scale_idle_s leaves, never the last. Fake time."""

from __future__ import annotations

import os
import socket
import threading

import pytest

from a2rl.grading.daemon import GradingDaemon
from a2rl.records import now
from a2rl.scheduling.launcher import open_sweep
from a2rl.store.sweepdir import STALE_S, GraderBeat, RunStatus
from conftest import until, write_sweep
from fakes import FakeClock

IDLE_S = 600.0


def never_left():
    raise AssertionError("the grader did not leave when idle with no run at work")


@pytest.mark.parametrize("state", ["running", "deferred", "submitted", "interrupted"])
def test_the_grader_waits_while_a_run_is_at_work_and_leaves_idle_after(tmp_path, tiny_model, state):
    sweep, (run,) = open_sweep(
        write_sweep(tmp_path, grader={"poll_s": 5.0, "lease_s": 5, "idle_timeout_s": IDLE_S}), tmp_path / "sd"
    )
    status = sweep.run_dir(run.run_id) / "status.json"
    # deferred/submitted: written once by the launcher (its heartbeat goes stale), submitted by a top-up job or
    # started by the scheduler hours later; interrupted: its job was requeued and waits for a node
    RunStatus(run_id=run.run_id, state=state, heartbeat_at=now()).dump(status)
    grader = GradingDaemon(sweep)
    clock = FakeClock(start=0.0)
    grader.sleep, grader.clock = clock.sleep, clock
    went_quiet = 3 * IDLE_S  # the run trains (or waits), silent, for three idle limits; then its job dies unseen
    clock.at[went_quiet] = lambda: RunStatus(  # this host's job: its stamp is judged on one clock
        run_id=run.run_id, state="running", host=socket.gethostname(), heartbeat_at=now() - 2 * STALE_S
    ).dump(status)
    clock.at[went_quiet + 5 * IDLE_S] = never_left
    assert grader.run() == 0
    # idle counted from the last poll that saw the run at work (within poll_s of its going quiet)
    assert went_quiet - 5.0 + IDLE_S < clock.now <= went_quiet + IDLE_S + 5.0
    assert grader._note == f"idle for {IDLE_S:g} s with no run at work, queued or deferred"


class FakePool:
    """STAND-IN for scheduling/graders.py's PoolOfJobs (the real one runs in test_grader_autoscale.py): the
    grader jobs the scheduler says are alive, and the starts asked of it."""

    def __init__(self, alive: int = 1):
        self.jobs, self.started = alive, 0

    def alive(self) -> int:
        return self.jobs

    def start(self) -> str:
        self.started += 1
        self.jobs += 1
        return f"job{self.jobs}"


def auto_sweep(tmp_path, **grader):
    g = {"workers": "auto", "poll_s": 5.0, "lease_s": 5, "idle_timeout_s": IDLE_S, **grader}
    return open_sweep(write_sweep(tmp_path, grader=g), tmp_path / "sd")


def test_a_submission_waiting_past_scale_wait_starts_another_grader(tmp_path, tiny_model):
    sweep, (run,) = auto_sweep(tmp_path, scale_wait_s=30)
    pool, clock = FakePool(), FakeClock(start=0.0)
    grader = GradingDaemon(sweep, 0, pool=pool)
    grader.clock = clock
    grader.scale_up()  # nothing pending
    sid = sweep.queue.submit(run.run_id, "output/v0", lambda sid: None, "test entry").submission_id
    entry = sweep.queue.pending / f"{sid}.json"
    grader.scale_up()  # it has just arrived
    assert pool.started == 0
    os.utime(entry, (now() - 31, now() - 31))
    grader.scale_up()
    assert pool.started == 1
    grader.scale_up()  # a new grader takes a while to start: not again within scale_wait_s
    clock.advance(29)
    grader.scale_up()
    assert pool.started == 1
    clock.advance(2)
    grader.scale_up()
    assert pool.started == 2
    clock.advance(31)
    sweep.queue.claim("grader9@elsewhere:1", 60, sweep.ledger.has)  # now being graded: nobody waits
    grader.scale_up()
    assert pool.started == 2
    # a fixed number of workers never scales
    (tmp_path / "f").mkdir()
    fixed, _ = open_sweep(write_sweep(tmp_path / "f", grader={"workers": 2}), tmp_path / "f" / "sd")
    assert GradingDaemon(fixed, 0, pool=pool).pool is None


def test_a_grader_busy_with_a_long_evaluation_still_asks_for_help(tmp_path, tiny_model):
    sweep, (run,) = auto_sweep(tmp_path, scale_wait_s=30, lease_s=0.3)  # its renewer runs every 0.1 s
    pool = FakePool()
    grader = GradingDaemon(sweep, 0, pool=pool)
    grading, waiting = (sweep.queue.submit(run.run_id, f"output/v{i}", lambda sid: None, "x") for i in range(2))
    assert sweep.queue.claim(grader.holder, 60, sweep.ledger.has).entry.submission_id == grading.submission_id
    aged = now() - 31
    os.utime(sweep.queue.pending / f"{waiting.submission_id}.json", (aged, aged))
    done = threading.Event()
    renewer = threading.Thread(target=grader._renew_loop, args=(grading.submission_id, done))
    renewer.start()
    try:
        until(lambda: pool.started, 60, "the renewer to ask the pool for another grader")
    finally:
        done.set()
        renewer.join()
    assert pool.started == 1


def beat(sweep, holder: str, state: str = "idle", age: float = 0.0) -> None:
    t = now() - age
    host = socket.gethostname()  # this host's grader: its stamp is judged on one clock
    GraderBeat(holder=holder, host=host, pid=1, started_at=t, heartbeat_at=t, graded=0, state=state).dump(
        sweep.graders / f"{holder}.json"
    )


def test_an_extra_idle_grader_leaves_but_never_the_last(tmp_path, tiny_model):
    sweep, _ = auto_sweep(tmp_path)
    pool = FakePool(alive=2)
    a, b = GradingDaemon(sweep, 0, pool=pool), GradingDaemon(sweep, 1, pool=pool)
    a._beat(), b._beat()
    assert a.leave_to_others()  # b serves
    assert not b.leave_to_others()  # a's heartbeat now says exited: b is the last and stays
    assert not GradingDaemon(sweep, 2, pool=FakePool(alive=1)).leave_to_others()  # the scheduler has no other job
    beat(sweep, b.holder, age=2 * STALE_S)  # b died silently
    assert not GradingDaemon(sweep, 3, pool=pool).leave_to_others()


def test_an_extra_grader_leaves_after_scale_idle_s_while_a_run_is_at_work(tmp_path, tiny_model):
    sweep, (run,) = auto_sweep(tmp_path, scale_idle_s=100)
    RunStatus(run_id=run.run_id, state="running", heartbeat_at=now()).dump(sweep.run_dir(run.run_id) / "status.json")
    beat(sweep, "grader7@other:1")  # another grader serves
    grader = GradingDaemon(sweep, 0, pool=FakePool(alive=2))
    clock = FakeClock(start=0.0)
    grader.sleep, grader.clock = clock.sleep, clock
    clock.at[5 * IDLE_S] = never_left
    assert grader.run() == 0
    assert 100 < clock.now <= 100 + 5.0 + 1
    assert grader._note == "idle for 100 s; 1 other grader(s) serve"
    assert GraderBeat.load(sweep.graders / f"{grader.holder}.json").state == "exited"
