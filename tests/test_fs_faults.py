"""What a cluster's shared file system does to the sweep directory, injected on local disk: locks that are not
real (ENOSYS, ENOLCK from flock), torn, stale and vanished reads, a half-written key, clocks hours apart."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

import a2rl.run.client as client_mod
import a2rl.scheduling.launcher as launcher_mod
import a2rl.store.queue as queue_mod
import a2rl.store.retries as retries_mod
from a2rl import records
from a2rl.grading.daemon import GradingDaemon
from a2rl.records import RecordError
from a2rl.run.api import GradingAPI
from a2rl.run.budget import Budget
from a2rl.run.client import post_submit
from a2rl.run.submit import RETRY_AFTER_S, NotEnqueued, RunSubmitter
from a2rl.run.workspace import create_workspace
from a2rl.scheduling.base import Schedulers
from a2rl.scheduling.launcher import Launcher, open_sweep
from a2rl.spec.tasks import get_task
from a2rl.store import freshness, integrity
from a2rl.store.freshness import Watch
from a2rl.store.integrity import KEY_FILE, create_key, read_key
from a2rl.store.locks import LocksUnsupported, sweep_lock
from a2rl.store.queue import Lease, SubmissionQueue
from a2rl.store.results import load_result, mark_lost
from a2rl.store.retries import RETRIES, read_retries
from a2rl.store.sweepdir import STALE_S, RunStatus
from a2rl.tasklib.prepare import ensure_prepared
from conftest import FIXTURES, REPO, a2rl, until, write_sweep
from fakes import FakeClock


@pytest.mark.parametrize("code", [errno.ENOSYS, errno.ENOLCK])
def test_no_flock_refuses_in_one_line_never_a_soft_lock(tmp_path, monkeypatch, code):
    queue = SubmissionQueue(tmp_path / "queue", key=b"k" * 32)

    def no_flock(fd, op):
        raise OSError(code, "flock not supported")

    monkeypatch.setattr(fcntl, "flock", no_flock)
    with pytest.raises(LocksUnsupported) as e:
        queue.submit("r1", "/m", lambda sid: None, error="x")
    msg = str(e.value)
    assert "\n" not in msg and str(tmp_path / "queue") in msg and errno.errorcode[code] in msg
    assert "`flock`" in msg and "nolock" in msg and "a2rl doctor" in msg
    assert not list((tmp_path / "queue" / "pending").iterdir())  # nothing enqueued on a lock it could not take
    assert queue.count("r1") == 0
    with pytest.raises(LocksUnsupported):  # every sweep lock, not only the queue's
        with sweep_lock(tmp_path / "other.lock", timeout=0.1):
            pass


def test_sweep_lock_excludes_and_times_out(tmp_path):
    from filelock import Timeout

    with sweep_lock(tmp_path / "x.lock", timeout=0.1):
        with pytest.raises(Timeout):
            with sweep_lock(tmp_path / "x.lock", timeout=0.1):
                pass
    with sweep_lock(tmp_path / "x.lock", timeout=0.1):  # released: free again
        pass


# ------------------------------------------------------------------ leases on the reader's clock
LEASE_S, POLL_S = 30.0, 1.0


class Node:
    """One node's view of a queue on local disk: its own wall clock (`offset_s` from this machine's) for what it
    writes, and its own monotonic clock (a FakeClock) for what it judges."""

    def __init__(self, root, offset_s: float, clock: FakeClock):
        self.queue = SubmissionQueue(root, key=b"k" * 32, watch=Watch(clock))
        self.offset_s = offset_s

    def __call__(self, monkeypatch, fn, *args):
        with monkeypatch.context() as m:
            m.setattr(queue_mod, "now", lambda: time.time() + self.offset_s)
            return fn(*args)


@pytest.fixture(params=[+1, -1], ids=["holder-ahead", "holder-behind"])
def nodes(tmp_path, monkeypatch, request):
    clock = FakeClock()
    monkeypatch.setattr(retries_mod, "time", clock)  # retries back off on virtual time
    hours = request.param * 3 * 3600
    a, b = Node(tmp_path / "q", hours, clock), Node(tmp_path / "q", -hours, clock)
    sid = a.queue.submit("r1", "/m", lambda sid: None, error="x").submission_id
    return a, b, clock, sid


def test_clocks_hours_apart_neither_steal_a_live_lease_nor_keep_a_dead_one(nodes, monkeypatch):
    a, b, clock, sid = nodes  # a's wall clock 3 h ahead of this machine's and b's 3 h behind, or the reverse
    recorded = lambda s: False  # noqa: E731
    assert a(monkeypatch, a.queue.claim, "A", LEASE_S, recorded).entry.submission_id == sid
    last_renewal = clock.now
    for step in range(int(4 * LEASE_S / POLL_S)):  # four lease lengths, a renewing every lease_s / 3
        if step % int(LEASE_S / 3 / POLL_S) == 0:
            assert a(monkeypatch, a.queue.renew, sid, "A", LEASE_S)
            last_renewal = clock.now
        assert b(monkeypatch, b.queue.claim, "B", LEASE_S, recorded) is None, f"stolen at t+{clock.now:.0f}"
        clock.advance(POLL_S)
    # a dies: b takes the lease once it has seen it unrenewed for lease_s, within one poll after that
    while (claim := b(monkeypatch, b.queue.claim, "B", LEASE_S, recorded)) is None:
        clock.advance(POLL_S)
        assert clock.now - last_renewal <= LEASE_S + 2 * POLL_S, "a dead lease kept past lease_s + one poll"
    assert LEASE_S <= clock.now - last_renewal <= LEASE_S + POLL_S
    assert claim.lease.attempt == 2 and claim.lease.holder == "B"
    assert not a(monkeypatch, a.queue.renew, sid, "A", LEASE_S)  # a, back, learns it lost the lease


def test_a_lease_that_stays_unreadable_expires_after_lease_s_of_the_readers_time(nodes, monkeypatch):
    a, b, clock, sid = nodes
    recorded = lambda s: False  # noqa: E731
    a(monkeypatch, a.queue.claim, "A", LEASE_S, recorded)
    lease = a.queue.leases / f"{sid}.json"
    lease.write_text(lease.read_text()[:40])  # torn: half a JSON object, as a stale page reads
    before = RETRIES.counts["lease"]
    while (claim := b.queue.claim("B", LEASE_S, recorded)) is None:
        clock.advance(POLL_S)
        assert clock.now < 1000.0 + LEASE_S + 2 * POLL_S, "an unreadable lease kept past lease_s + one poll"
    assert clock.now >= 1000.0 + LEASE_S  # unreadable is not free: it waited the lease out
    assert claim.lease.holder == "B" and RETRIES.counts["lease"] > before


def test_a_lease_written_by_an_older_a2rl_is_read(tmp_path):
    q = SubmissionQueue(tmp_path / "q", key=b"k" * 32)
    old = {"submission_id": "r1.0001", "holder": "g", "claimed_at": 1.0, "expires_at": 0.0, "attempt": 1}
    (q.leases / "r1.0001.json").write_text(json.dumps({**old, "schema_version": 1}))
    lease = Lease.load(q.leases / "r1.0001.json")
    assert lease.released and lease.renewals == 0 and lease.schema_version == Lease.SCHEMA  # released in version 1
    (q.leases / "r1.0001.json").write_text(json.dumps({**old, "expires_at": 5.0, "schema_version": 1}))
    assert not Lease.load(q.leases / "r1.0001.json").released


def test_another_hosts_heartbeat_is_stale_only_after_the_reader_watched_it_silent(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(freshness, "WATCH", Watch(clock))
    hours_ago = time.time() - 7200  # its wall clock is 2 h behind: by stamps it would look dead at once
    status = RunStatus(run_id="r9", state="running", host="elsewhere", heartbeat_at=hours_ago)
    assert not status.stale()
    clock.advance(STALE_S - 1)
    assert not status.stale()
    clock.advance(2)
    assert status.stale()  # silent for STALE_S on the reader's clock
    beat = status.model_copy(update={"heartbeat_at": hours_ago + 10})
    assert not beat.stale()  # it changed: alive again, whatever its stamp says


# ------------------------------------------------------------------ torn, stale and vanished reads
def faulty_reads(monkeypatch, name: str | Path, errors: list):
    """records.read_bytes raising (an OSError) or returning (torn bytes) each of `errors` in turn for the file
    at `name` (a Path) or called `name`, then reading it."""
    real = records.read_bytes

    def read_bytes(path):
        if (Path(path) == name if isinstance(name, Path) else Path(path).name == name) and errors:
            e = errors.pop(0)
            if isinstance(e, bytes):
                return e
            raise e
        return real(path)

    monkeypatch.setattr(records, "read_bytes", read_bytes)


ESTALE = OSError(errno.ESTALE, "Stale file handle")


@pytest.fixture
def sweep(tmp_path, monkeypatch):
    monkeypatch.setattr(retries_mod, "time", FakeClock())
    sweep, (run,) = open_sweep(write_sweep(tmp_path, grader={"lock_timeout_s": 1}), tmp_path / "sd")
    return sweep, run


@pytest.mark.parametrize("fault", [[ESTALE, ESTALE], [b'{"submission_id": "r', ESTALE]], ids=["estale", "torn"])
def test_a_queue_entry_read_torn_or_stale_is_claimed_not_rejected(sweep, monkeypatch, fault):
    sweep, run = sweep
    sid = sweep.queue.submit(run.run_id, "/m", lambda sid: None, error="x").submission_id
    before = RETRIES.counts["queue entry"]
    faulty_reads(monkeypatch, sweep.queue.pending / f"{sid}.json", list(fault))
    claim = sweep.queue.claim("g", LEASE_S, sweep.ledger.has)
    assert claim is not None and claim.entry.submission_id == sid
    assert not list(sweep.queue.rejected.iterdir())
    assert RETRIES.counts["queue entry"] == before + len(fault)
    assert read_retries(sweep.root)["queue entry"] >= len(fault)  # where `a2rl status` finds it


def test_a_queue_entry_unreadable_for_longer_waits_for_the_next_claim(sweep, monkeypatch):
    sweep, run = sweep
    sid = sweep.queue.submit(run.run_id, "/m", lambda sid: None, error="x").submission_id
    faulty_reads(monkeypatch, sweep.queue.pending / f"{sid}.json", [ESTALE] * retries_mod.ATTEMPTS)
    assert sweep.queue.claim("g", LEASE_S, sweep.ledger.has) is None  # nothing to claim this round
    assert sweep.queue.pending_ids() == [sid] and not list(sweep.queue.rejected.iterdir())
    assert sweep.queue.claim("g", LEASE_S, sweep.ledger.has).entry.submission_id == sid


def test_a_queue_entry_that_vanishes_between_listing_and_opening_is_skipped(sweep, monkeypatch):
    sweep, run = sweep
    sid = sweep.queue.submit(run.run_id, "/m", lambda sid: None, error="x").submission_id
    faulty_reads(monkeypatch, sweep.queue.pending / f"{sid}.json", [FileNotFoundError(errno.ENOENT, "gone")])
    assert sweep.queue.claim("g", LEASE_S, sweep.ledger.has) is None  # retired by another grader, as it seemed
    assert not list(sweep.queue.rejected.iterdir())


@pytest.mark.parametrize("fault", [[ESTALE], [b'{"run_id": "r', ESTALE]], ids=["estale", "torn"])
def test_a_status_and_a_result_read_torn_or_stale_are_retried(sweep, monkeypatch, fault):
    sweep, run = sweep
    RunStatus(run_id=run.run_id, state="running", host="h", heartbeat_at=1.0).dump(
        sweep.run_dir(run.run_id) / "status.json"
    )
    mark_lost(sweep, run, "test")
    before = dict(RETRIES.counts)
    faulty_reads(monkeypatch, "status.json", list(fault))
    assert sweep.status(run.run_id).state == "running"
    faulty_reads(monkeypatch, "result.json", list(fault))
    assert load_result(sweep, run.run_id).status == "failed"
    for what in ("status", "result"):
        assert RETRIES.counts[what] == before.get(what, 0) + len(fault)


def test_the_follower_survives_a_torn_read_and_names_what_a_finished_sweep_left_ungraded(sweep, monkeypatch, capsys):
    sweep, run = sweep
    sid = sweep.queue.submit(run.run_id, "/m", lambda sid: None, error="x").submission_id
    mark_lost(sweep, run, "test")  # the run is over; its submission was never graded and no grader is alive
    monkeypatch.setattr(launcher_mod, "replace_dead_grader", lambda *a: None)  # no grader job started here
    faulty_reads(monkeypatch, "runs.json", [ESTALE] * retries_mod.ATTEMPTS * 2)  # the sweep's index, stale
    assert Launcher(sweep, "local", Schedulers()).follow(poll_s=0, sleep=lambda s: None) == 1
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == f"sweep finished with 1 submission(s) not graded: {sid}; " + (
        "`a2rl launch` on the sweep again starts a grader for them"
    )
    assert RETRIES.counts["sweep state"] >= 1
    out = a2rl("status", str(sweep.root), check=True).stdout  # what the follower left undone, and its retries
    assert f"1 submission(s) not graded: {sid}" in out and "reads retried (shared file system): " in out
    assert "sweep state " in out


# ------------------------------------------------------------------ the key
def test_a_short_or_empty_key_is_refused_in_one_line(tmp_path):
    for text in ("", "ab" * 5):
        (tmp_path / KEY_FILE).write_text(text)
        with pytest.raises(RecordError) as e:
            read_key(tmp_path)
        assert "\n" not in str(e.value) and ("not 32" in str(e.value) or "cannot read" in str(e.value))


def test_a_key_read_while_being_created_is_absent_or_whole_never_half(tmp_path, monkeypatch):
    seen = []
    real_fsync = os.fsync

    def fsync_then_look(fd):  # the creator has written and is syncing: a reader on another node looks now
        real_fsync(fd)
        try:
            seen.append(read_key(tmp_path))
        except RecordError as e:
            seen.append(str(e))

    monkeypatch.setattr(integrity.os, "fsync", fsync_then_look)
    create_key(tmp_path)
    assert "cannot read the signing key" in seen[0] and "No such file" in seen[0]  # not there yet, not empty
    key = read_key(tmp_path)
    assert len(key) == 32
    monkeypatch.setattr(integrity.os, "fsync", real_fsync)
    create_key(tmp_path)  # a second creator (another node) loses cleanly: the first key stands
    assert read_key(tmp_path) == key and [p.name for p in tmp_path.iterdir()] == [KEY_FILE]


# ------------------------------------------------------------------ /submit: 503 with Retry-After
def test_a_held_queue_lock_is_a_503_with_retry_after_which_the_client_honours(tmp_path, tiny_model, monkeypatch):
    sweep, (run,) = open_sweep(write_sweep(tmp_path, grader={"lock_timeout_s": 0.2}), tmp_path / "sd")
    task = get_task("echo", [FIXTURES / "tasks"])
    ws = create_workspace(
        sweep.workspace(run.run_id),
        task=task,
        data=ensure_prepared(task, sweep.data_root()),
        model_dir=tiny_model,
        budget_s=60,
        source_tree=REPO,
    )
    submitter = RunSubmitter(sweep, run, ws, Budget(60))
    grader, stop = GradingDaemon(sweep), threading.Event()

    def grade_loop() -> None:  # an invalid submission: graded without a model
        while not stop.wait(0.05):
            if (claim := sweep.queue.claim(grader.holder, 60, sweep.ledger.has)) is not None:
                grader.grade(claim)

    held = sweep_lock(sweep.queue.root / ".lock")  # another node holds the queue past the lock timeout
    held.acquire()
    waits: list[float] = []

    def wait(seconds: float) -> None:  # the client waits as told; meanwhile the other node lets go
        waits.append(seconds)
        held.release()

    threading.Thread(target=grade_loop, daemon=True).start()
    try:
        with GradingAPI(submitter, submitter.budget) as api:
            monkeypatch.setenv("GRADING_TOKEN", api.token)
            body, error = post_submit(f"{api.url}/submit", "output/none", 60, sleep=wait)
    finally:
        stop.set()
    assert waits == [RETRY_AFTER_S]  # one 503, its Retry-After honoured, then answered
    assert body["submission_id"] == f"{run.run_id}.0001" and "HTTP" not in (error or "")
    assert sweep.queue.count(run.run_id) == 1  # the refused attempt enqueued nothing


def test_the_503_says_retry_after_and_nothing_was_submitted(tmp_path, monkeypatch):
    class Busy:
        def submit(self, model_path: str, final: bool = False):
            raise NotEnqueued("the sweep directory did not take the submission (Timeout: lock held)")

    with GradingAPI(Busy(), Budget(60)) as api:
        req = urllib.request.Request(
            f"{api.url}/submit",
            data=b'{"model_path": "output/v0"}',
            headers={"Authorization": f"Bearer {api.token}", "Content-Type": "application/json"},
            method="POST",
        )
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=30)
        answer = json.loads(e.value.read())
        monkeypatch.setenv("GRADING_TOKEN", api.token)
        waits: list[float] = []
        body, error = post_submit(f"{api.url}/submit", "output/v0", 30, sleep=waits.append)
    assert e.value.code == 503 and e.value.headers["Retry-After"] == str(RETRY_AFTER_S)
    assert "nothing was submitted" in answer["error"] and "\n" not in answer["error"]
    assert waits == [RETRY_AFTER_S] * client_mod.RETRIES_503  # bounded: then the 503 is the answer
    assert error.endswith("(HTTP 503)") and "nothing was submitted" in error


def test_no_torn_or_stale_read_ends_the_grader(tmp_path, tiny_model, monkeypatch):
    monkeypatch.setattr(retries_mod, "time", FakeClock())
    sweep, (run,) = open_sweep(write_sweep(tmp_path, grader={"poll_s": 0.05, "idle_timeout_s": 600}), tmp_path / "sd")
    sid = sweep.queue.submit(run.run_id, "/m", lambda sid: None, error="x").submission_id
    mark_lost(sweep, run, "test")  # over: the grader leaves once its submission is graded
    before = dict(RETRIES.counts)
    entry = sweep.queue.pending / f"{sid}.json"
    faulty_reads(monkeypatch, entry, [b'{"subm', ESTALE] * retries_mod.ATTEMPTS)  # unreadable for two claims
    real_stamp = SubmissionQueue.pending_stamp
    stale = [OSError(errno.ESTALE, "Stale file handle")] * 3

    def pending_stamp(self):
        if stale:
            raise stale.pop()
        return real_stamp(self)

    monkeypatch.setattr(SubmissionQueue, "pending_stamp", pending_stamp)
    grader = GradingDaemon(sweep)
    assert grader.run() == 0 and grader._note == "every run has finished"
    assert sweep.ledger.get(sid).status == "invalid" and not list(sweep.queue.rejected.iterdir())
    assert RETRIES.counts["queue entry"] - before.get("queue entry", 0) == 2 * retries_mod.ATTEMPTS
    assert RETRIES.counts["queue"] - before.get("queue", 0) == 3


@pytest.mark.slow  # about 6 s: four lease lengths with the holder alive, then the takeover
def test_two_processes_with_clocks_hours_apart_share_a_queue(tmp_path):
    """Real processes under `faketime` (wall and monotonic clocks 6 h apart): the taker never steals
    the live holder's lease, and takes it at its first poll after lease_s unrenewed once the holder is SIGKILLed."""
    lease_s, poll_s = 1.0, 0.1
    queue = SubmissionQueue(tmp_path / "q", key=b"k" * 32)
    queue.submit("r1", "/m", lambda sid: None, error="x")
    lib = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"  # Debian's faketime; preloaded, not its wrapper
    # (which forks: a SIGKILL must reach the holder itself); time.sleep needs the monotonic clock faked too

    def node(offset: str, role: str) -> subprocess.Popen:
        env = {**os.environ, "LD_PRELOAD": lib, "FAKETIME": offset}
        env.pop("FAKETIME_DONT_FAKE_MONOTONIC", None)
        args = [str(tmp_path / "q"), str(lease_s), str(poll_s)]
        return subprocess.Popen(
            [sys.executable, str(FIXTURES / "lease_node.py"), role, *args], env=env, stdout=subprocess.PIPE, text=True
        )

    holder = node("+3h", "hold")
    taker = None
    try:
        until(lambda: list(queue.leases.glob("*.json")), 60, "the holder's lease")
        taker = node("-3h", "take")
        time.sleep(4 * lease_s)  # four lease lengths with the holder alive (a lower bound: a slow machine waits more)
        assert holder.poll() is None and taker.poll() is None, "the live holder's lease was taken"
        holder.kill()
        holder.wait()
        out = json.loads(taker.communicate(timeout=120)[0])
    finally:
        for p in (holder, taker):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
    assert out["silent_before"] < lease_s  # taken at the first poll past lease_s unrenewed
    assert out["attempt"] == 2 and abs(out["wall"] - time.time() + 3 * 3600) < 600  # its clock was 3 h behind
