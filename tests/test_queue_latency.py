"""An idle grader notices a new queue entry by statting pending/ (its mtime) every WATCH_S, not by listing the
queue under its lock every poll_s; the listing every poll_s stays as the fallback. Time is faked here: the
figures in wall time are tools/bench/queue_latency.py's."""

from __future__ import annotations

import pytest

from a2rl.grading.daemon import GradingDaemon
from a2rl.scheduling.launcher import open_sweep
from a2rl.store.queue import WATCH_S, SubmissionQueue
from conftest import write_sweep

POLL_S = 600.0  # a full poll would be obvious in fake time


class FakeTime:
    """A clock that moves only when slept on; `on_sleep` runs at each sleep, as other processes would."""

    def __init__(self, on_sleep=lambda t: None):
        self.t, self.on_sleep = 0.0, on_sleep

    def clock(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s
        self.on_sleep(self.t)


def enqueue(queue: SubmissionQueue, run_id: str) -> str:
    return queue.submit(run_id, "output/x", lambda sid: None, error="rejected before grading").submission_id


def test_wait_for_change_returns_at_the_first_stat_after_an_entry_arrives(tmp_path):
    queue = SubmissionQueue(tmp_path / "queue", key=b"k" * 32)
    arrived = []
    fake = FakeTime(lambda t: arrived or t < 3 * WATCH_S or arrived.append((t, enqueue(queue, "r"))))
    assert queue.wait_for_change(queue.pending_stamp(), POLL_S, sleep=fake.sleep, clock=fake.clock)
    assert fake.t == arrived[0][0]  # noticed at the stat right after it arrived, far before POLL_S


def test_wait_for_change_times_out_after_poll_s_when_nothing_changes(tmp_path):
    queue = SubmissionQueue(tmp_path / "queue", key=b"k" * 32)
    fake = FakeTime()
    assert not queue.wait_for_change(queue.pending_stamp(), 1.0, sleep=fake.sleep, clock=fake.clock)
    assert fake.t == pytest.approx(1.0)


class Done(Exception):
    pass


def drive(grader: GradingDaemon, run_id: str, idle_sleeps: int = 20) -> tuple[float, float, int]:
    """Run the grader on fake time: idle for `idle_sleeps` sleeps, enqueue one entry, stop once it is recorded.
    Returns (fake time of the enqueue, fake time it was seen recorded, claims made while idle)."""
    sleeps, seen, claims = [], {}, []
    real_claim = grader.queue.claim
    grader.queue.claim = lambda *a: claims.append(len(sleeps)) or real_claim(*a)

    def on_sleep(t: float) -> None:
        sleeps.append(t)
        if len(sleeps) == idle_sleeps:
            seen["sid"], seen["at"] = enqueue(grader.queue, run_id), t
        elif "sid" in seen and grader.ledger.has(seen["sid"]):
            seen["recorded"] = t
            raise Done

    fake = FakeTime(on_sleep)
    grader.sleep, grader.clock = fake.sleep, fake.clock
    with pytest.raises(Done):
        grader.run()
    return seen["at"], seen["recorded"], sum(1 for n in claims if n < idle_sleeps)


@pytest.fixture
def grader(tmp_path, tiny_model) -> tuple[GradingDaemon, str]:
    sweep, (run,) = open_sweep(
        write_sweep(tmp_path, grader={"poll_s": POLL_S, "lease_s": 5, "idle_timeout_s": 3600}), tmp_path / "sd"
    )
    return GradingDaemon(sweep), run.run_id


def test_the_grader_notices_a_new_entry_without_waiting_poll_s(grader):
    daemon, run_id = grader
    enqueued, recorded, idle_claims = drive(daemon, run_id)
    assert recorded - enqueued <= 2 * WATCH_S  # the next stat, then the claim and the record, then a sleep
    assert idle_claims == 0  # while pending/ is empty, no lock is taken


def test_the_grader_still_lists_the_queue_every_poll_s(grader, monkeypatch):
    daemon, run_id = grader
    monkeypatch.setattr(daemon.queue, "pending_stamp", lambda: (0, 0, 0))  # a change the stat cannot see (NFS)
    enqueued, recorded, _ = drive(daemon, run_id)
    assert POLL_S - 20 * WATCH_S <= recorded - enqueued <= POLL_S + 2 * WATCH_S
