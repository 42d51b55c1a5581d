"""The budget rule (docs/sweeps.md): grading waits are free for an agent that waits honestly, but only
up to a cap, so an agent that always keeps a submission in flight still spends its budget; one wait at a time;
nothing after the end. A fake clock: no sleeping, no wall-clock bounds."""

from __future__ import annotations

import pytest

from a2rl.run.budget import Budget, BudgetExhausted, WaitInFlight


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_an_honest_agent_is_not_charged_for_grading_waits():
    clock = Clock()
    b = Budget(100, uncharged_cap_s=50, clock=clock)
    for _ in range(4):  # works 10 s, then waits 10 s for its score
        clock.t += 10
        with b.grading_wait():
            clock.t += 10
    assert b.used() == pytest.approx(40) and b.uncharged() == pytest.approx(40)


def test_an_agent_that_always_has_a_submission_in_flight_still_spends_its_budget():
    """It works while its submissions wait: past the cap every second counts, and the clock runs out."""
    clock = Clock()
    b = Budget(100, uncharged_cap_s=50, clock=clock)
    while not b.expired():
        with b.grading_wait():
            clock.t += 10
        assert clock.t <= 150  # frozen clocks never get here: the rule bounds the wall time
    assert clock.t == pytest.approx(150) and b.uncharged() == pytest.approx(50)
    with pytest.raises(BudgetExhausted):
        with b.grading_wait():
            pass


def test_one_wait_at_a_time_and_the_runs_own_pauses_are_not_capped():
    clock = Clock()
    b = Budget(100, uncharged_cap_s=5, clock=clock)
    with b.grading_wait():
        with pytest.raises(WaitInFlight):
            with b.grading_wait():
                pass
        clock.t += 3
    b.pause()  # e.g. waiting for the local driver: not the agent's doing, never charged
    clock.t += 500
    b.resume()
    assert b.used() == 0 and b.uncharged() == pytest.approx(3)


def test_a_wait_racing_the_end_is_refused_and_a_requeue_resumes_the_clock():
    clock = Clock()
    b = Budget(100, used_before_s=99, clock=clock)
    clock.t += 1
    with pytest.raises(BudgetExhausted):
        with b.grading_wait():
            pass
    assert b.remaining() == 0


def test_a_requeue_resumes_the_uncharged_time_too_so_the_cap_is_the_runs_not_the_jobs():
    """Attempt 1 used 48 s of a 50 s cap; a requeued attempt that waits 10 s more gets 2 s free, not 10."""
    clock = Clock()
    b = Budget(100, used_before_s=20, uncharged_before_s=48, uncharged_cap_s=50, clock=clock)
    with b.grading_wait():
        clock.t += 10
    assert b.uncharged() == pytest.approx(50) and b.used() == pytest.approx(28)
