"""A full sweep file system (ENOSPC, faked here; tests/test_slurm_nodes.py fills a real one under a sweep):
writes wait for room and are then done whole, a submission is never made invalid by it, and what gives up
says so in one line."""

from __future__ import annotations

import errno
import logging

import pytest

import a2rl.records as records
from a2rl.grading.daemon import GradingDaemon
from a2rl.records import StorageFull, atomic_write_text, disk_full, while_full
from a2rl.run.api import GradingAPI
from a2rl.run.budget import Budget
from a2rl.run.client import post_submit
from a2rl.run.process import AgentProcess
from a2rl.scheduling.launcher import open_sweep
from a2rl.store.queue import SubmissionQueue
from conftest import write_sweep
from fakes import FakeClock

FULL = OSError(errno.ENOSPC, "No space left on device")


def full_times(n: int, then=lambda: "written"):
    """A write that fails for lack of space `n` times, then does `then`."""
    calls = []

    def write():
        calls.append(1)
        if len(calls) <= n:
            raise OSError(errno.ENOSPC, "No space left on device")
        return then()

    return write, calls


@pytest.fixture
def no_wait(monkeypatch):
    monkeypatch.setattr(records, "FULL_RETRY_S", 0.0)


def test_a_write_waits_for_room_and_warns_once_a_minute(caplog):
    clock = FakeClock()
    write, calls = full_times(30)
    with caplog.at_level(logging.WARNING, "a2rl.records"):
        assert while_full(write, "the result", sleep=clock.sleep, clock=clock.monotonic) == "written"
    assert len(calls) == 31 and clock.monotonic() - 1000.0 == pytest.approx(30 * records.FULL_RETRY_S)
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 3 and all("\n" not in w for w in warnings)  # at 0, 60 and 120 s of 150 s
    assert warnings[0] == "the result: no space left on the file system (No space left on device); retrying every 5 s"


def test_a_write_gives_up_after_give_up_s_with_one_line():
    clock = FakeClock()
    write, _ = full_times(10**6)
    with pytest.raises(StorageFull) as e:
        while_full(write, "the result", give_up_s=60, sleep=clock.sleep, clock=clock.monotonic)
    assert e.value.strerror == "the result: the file system stayed full for 60 s (No space left on device)"


def test_other_errors_are_not_waited_on():
    def write():
        raise PermissionError(errno.EACCES, "Permission denied")

    with pytest.raises(PermissionError):
        while_full(write, "x", sleep=lambda s: pytest.fail("slept"))
    assert disk_full(RuntimeError("wrapped")) is False
    wrapped = RuntimeError("wrapped")
    wrapped.__cause__ = OSError(errno.EDQUOT, "Disk quota exceeded")
    assert disk_full(wrapped)


def test_an_atomic_write_that_runs_out_of_space_leaves_the_old_file_and_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "r.json"
    atomic_write_text(path, '{"v": 1}\n')

    def no_room(fd):
        raise FULL

    monkeypatch.setattr(records.os, "fsync", no_room)
    with pytest.raises(OSError) as e:
        atomic_write_text(path, '{"v": 2}\n')
    assert disk_full(e.value)
    assert path.read_text() == '{"v": 1}\n' and [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_a_submission_frozen_on_a_full_file_system_is_enqueued_once_there_is_room(tmp_path, no_wait):
    """Not the agent's invalid submission: the copy is retried under the same id, and the entry written then."""
    queue = SubmissionQueue(tmp_path / "queue", key=b"k" * 32)
    freeze, calls = full_times(2, then=lambda: str(tmp_path / "frozen"))
    entry = queue.submit("r", "output/v0", lambda sid: freeze())
    assert len(calls) == 3 and entry.error is None and entry.artifact == str(tmp_path / "frozen")
    assert entry.submission_id == "r.0001" and queue.pending_ids() == ["r.0001"]
    # an unreadable model directory still is the agent's invalid submission
    bad = queue.submit("r", "output/v1", lambda sid: (_ for _ in ()).throw(PermissionError(13, "Permission denied")))
    assert bad.submission_id == "r.0002" and "could not snapshot the model directory" in bad.error


def test_the_grader_records_a_score_once_there_is_room(tmp_path, tiny_model, no_wait, monkeypatch):
    sweep, (run,) = open_sweep(write_sweep(tmp_path), tmp_path / "sd")
    grader = GradingDaemon(sweep)
    sid = grader.queue.submit(run.run_id, "output/x", lambda sid: None, error="refused").submission_id
    record, calls = full_times(2)
    real = grader.ledger.record
    monkeypatch.setattr(grader.ledger, "record", lambda entry: record() and real(entry))
    claim = grader.queue.claim(grader.holder, 60, grader.ledger.has)
    assert grader.grade(claim).status == "invalid" and len(calls) == 3
    assert grader.ledger.get(sid) is not None and not grader.queue.pending_ids()


class FullThenRoom:
    """A log file on a file system that is full for the first `n` writes."""

    def __init__(self, n: int):
        self.n, self.data = n, b""

    def write(self, data: bytes) -> int:
        if self.n:
            self.n -= 1
            raise FULL
        self.data += data
        return len(data)


def test_the_agents_output_is_dropped_while_the_log_is_full_and_the_gap_noted():
    """The copy never stops (an agent whose pipe is not drained blocks on its next print)."""
    proc = AgentProcess.__new__(AgentProcess)
    proc.log, proc.log_dropped = FullThenRoom(2), 0
    for chunk in (b"lost 1\n", b"lost 2\n", b"kept\n"):
        proc._write(chunk)
    assert proc.log.data == b"\n[a2rl] 14 bytes of the agent's output dropped here: no space left\nkept\n"


def test_a_submission_that_gave_up_waiting_is_answered_in_one_line(monkeypatch):
    class GaveUp:
        def submit(self, model_path: str, final: bool = False):
            raise StorageFull(errno.ENOSPC, "r.0001: copying the model into the sweep: the file system stayed full")

    with GradingAPI(GaveUp(), Budget(60)) as api:
        monkeypatch.setenv("GRADING_TOKEN", api.token)
        body, error = post_submit(f"{api.url}/submit", "output/v0", 30)
    assert error == (
        "r.0001: copying the model into the sweep: the file system stayed full; nothing was submitted, "
        "try again later (HTTP 503)"
    )
