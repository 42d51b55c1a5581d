"""The submission queue (store/queue.py) on its own, on virtual time: numbering and signing at submit, the claim
order, leases taken, renewed, released and expired on the reader's clock, recorded entries retired, and entries
that do not verify set aside, never graded (test_fs_faults.py has clocks apart and faulty reads)."""

from __future__ import annotations

import json
import logging
import os
import socket

import pytest

from a2rl.records import RecordError, StorageFull
from a2rl.store import queue as queue_mod
from a2rl.store import retries as retries_mod
from a2rl.store.freshness import Watch
from a2rl.store.queue import Lease, QueueEntry, SubmissionQueue, holder_id
from a2rl.store.retries import RETRIES
from a2rl.upgrades import upgrade
from fakes import FakeClock

KEY = b"k" * 32
LEASE_S = 10.0
never = lambda sid: False  # noqa: E731  nothing recorded in the ledger


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def q(tmp_path, clock) -> SubmissionQueue:
    return SubmissionQueue(tmp_path / "queue", KEY, watch=Watch(clock))


def aged(q: SubmissionQueue, sid: str, mtime: float) -> None:
    os.utime(q.pending / f"{sid}.json", (mtime, mtime))


def test_submit_numbers_per_run_freezes_records_and_signs(q):
    calls = []

    def artifact_for(sid):
        calls.append(("freeze", sid))
        return f"/frozen/{sid}"

    def record(sid, seq):
        calls.append(("record", sid, seq))
        return "no git" if seq == 2 else None

    first = q.submit("run.a", "/out/m", artifact_for, record=record, budget_used_s=5.0, tokens=7, cost_usd=0.5)
    second = q.submit("run.a", "/out/n", artifact_for, record=record)
    other = q.submit("run.b", "/out/o", artifact_for)
    assert [e.submission_id for e in (first, second, other)] == ["run.a.0001", "run.a.0002", "run.b.0001"]
    assert (first.seq, second.seq, other.seq) == (1, 2, 1) and (q.count("run.a"), q.count("run.b")) == (2, 1)
    assert q.count("none") == 0
    assert calls == [
        ("freeze", "run.a.0001"),
        ("record", "run.a.0001", 1),
        ("freeze", "run.a.0002"),
        ("record", "run.a.0002", 2),
        ("freeze", "run.b.0001"),
    ]
    assert (first.artifact, first.model_path, first.error, first.snapshot_error) == (
        "/frozen/run.a.0001",
        "/out/m",
        None,
        None,
    )
    assert (first.budget_used_s, first.tokens, first.cost_usd) == (5.0, 7, 0.5) and second.snapshot_error == "no git"
    stored = QueueEntry.load_verified(q.pending / "run.a.0001.json", KEY)  # signed with the sweep's key
    assert stored.model_dump(exclude={"schema_version"}) == first.model_dump(exclude={"schema_version"})
    assert q.entry("run.a.0002").snapshot_error == "no git" and q.entry("run.a.0009") is None
    assert [e.seq for e in q.entries("run.a")] == [1, 2] and q.pending_ids() == [
        "run.a.0001",
        "run.a.0002",
        "run.b.0001",
    ]


def test_a_rejected_or_failed_snapshot_is_an_invalid_entry_and_a_full_disk_is_not(q, monkeypatch):
    def boom(sid):
        raise OSError("no such file")

    failed = q.submit("r", "/m", boom)
    assert failed.artifact is None and failed.error == "could not snapshot the model directory: no such file"
    refused = q.submit("r", "/m", lambda sid: pytest.fail("frozen"), error="a LoRA adapter")
    assert refused.error == "a LoRA adapter" and refused.artifact is None

    def full(sid):
        raise StorageFull("full")

    monkeypatch.setattr(queue_mod, "while_full", lambda write, what: write())
    with pytest.raises(StorageFull):
        q.submit("r", "/m", full)
    assert len(q.entries("r")) == 2  # nothing enqueued for it


def test_claims_go_oldest_first_and_a_live_lease_is_skipped(q, clock):
    for _ in range(3):
        q.submit("r", "/m", lambda sid: "/a")
    aged(q, "r.0001", 300)
    aged(q, "r.0002", 100)
    aged(q, "r.0003", 100)  # as old as r.0002: by name
    claimed = [q.claim(f"g{i}", LEASE_S, never) for i in range(4)]
    assert [c.entry.submission_id for c in claimed[:3]] == ["r.0002", "r.0003", "r.0001"]
    assert claimed[3] is None  # every one leased, none expired
    c = claimed[0]
    assert (c.lease.holder, c.lease.attempt, c.lease.renewals, c.lease.released) == ("g0", 1, 0, False)
    assert c.lease.expires_at == c.lease.claimed_at + LEASE_S
    on_disk = Lease.load(q.leases / "r.0002.json")
    assert (on_disk.holder, on_disk.attempt, on_disk.submission_id) == ("g0", 1, "r.0002")


def test_a_lease_expires_after_lease_s_unrenewed_on_the_readers_clock_and_renewals_keep_it(q, clock, monkeypatch):
    sid = q.submit("r", "/m", lambda sid: "/a").submission_id
    assert q.claim("A", LEASE_S, never).lease.attempt == 1
    assert q.claim("B", LEASE_S, never) is None  # first seen now
    clock.advance(LEASE_S - 1)
    monkeypatch.setattr(queue_mod, "now", lambda: 5000.0)  # the holder's wall clock, stamped for people
    assert q.renew(sid, "A", LEASE_S)
    renewed = Lease.load(q.leases / f"{sid}.json")
    assert (renewed.renewals, renewed.expires_at, renewed.holder) == (1, 5000.0 + LEASE_S, "A")
    assert q.claim("B", LEASE_S, never) is None  # renewed: seen changed, silent for 0 s
    clock.advance(LEASE_S - 0.5)
    assert q.claim("B", LEASE_S, never) is None
    assert q.oldest_wait(1e12, LEASE_S) == 0  # leased: nobody waits
    clock.advance(0.5)  # lease_s unrenewed exactly: gone
    assert q.oldest_wait(1e12, LEASE_S) > 0
    taken = q.claim("B", LEASE_S, never)
    assert (taken.lease.holder, taken.lease.attempt) == ("B", 2)
    assert not q.renew(sid, "A", LEASE_S)  # A learns it lost it
    assert not q.renew("r.0009", "A", LEASE_S)  # no lease at all


def test_a_released_claim_is_free_at_once_without_using_an_attempt(q, clock):
    sid = q.submit("r", "/m", lambda sid: "/a").submission_id
    q.claim("A", LEASE_S, never)
    q.release(sid, "B")  # not B's to release
    assert q.claim("B", LEASE_S, never) is None
    q.release(sid, "A")
    lease = Lease.load(q.leases / f"{sid}.json")
    assert lease.released and lease.attempt == 0
    again = q.claim("B", LEASE_S, never)
    assert (again.lease.holder, again.lease.attempt) == ("B", 1)
    q.release("r.0009", "A")  # nothing there: nothing happens


def test_recorded_or_finished_entries_are_retired_never_claimed(q):
    for _ in range(2):
        q.submit("r", "/m", lambda sid: "/a")
    sid = q.claim("A", LEASE_S, never).entry.submission_id
    q.finish(sid)
    assert not (q.leases / f"{sid}.json").exists() and (q.done / f"{sid}.json").exists()
    assert q.pending_ids() == ["r.0002"] and q.entry(sid).submission_id == sid  # done/ still answers
    assert q.claim("A", LEASE_S, lambda s: s == "r.0002") is None  # recorded already: retired, not graded
    assert q.pending_ids() == [] and (q.done / "r.0002.json").exists()
    assert [e.seq for e in q.entries("r")] == [1, 2]
    q.finish("r.0002")  # twice: nothing to move


def test_entries_that_do_not_verify_are_set_aside_never_claimed(q, caplog):
    good = q.submit("r", "/m", lambda sid: "/a")
    forged = good.model_copy(update={"submission_id": "r.0002", "seq": 2, "hmac": None})
    forged.dump(q.pending / "r.0002.json")
    # a signed entry copied under another name
    (q.pending / "r.0003.json").write_bytes((q.pending / "r.0001.json").read_bytes())
    for sid in ("r.0002", "r.0003"):
        aged(q, sid, 1)  # older: claimed first, if at all
    with caplog.at_level(logging.WARNING, "a2rl.queue"):
        assert q.claim("A", LEASE_S, never).entry.submission_id == "r.0001"
        assert q.claim("A", LEASE_S, never) is None
    assert sorted(p.name for p in q.rejected.iterdir()) == ["r.0002.json", "r.0003.json"]
    assert q.pending_ids() == ["r.0001"] and list(q.leases.iterdir()) == [q.leases / "r.0001.json"]
    assert "holds the entry of r.0001" in caplog.text and "is unsigned" in caplog.text
    # the listing of a run's entries skips what does not verify, with a warning
    forged.dump(q.done / "r.0004.json")
    with caplog.at_level(logging.WARNING, "a2rl.queue"):
        caplog.clear()
        assert [e.submission_id for e in q.entries("r")] == ["r.0001"]
    assert "is unsigned" in caplog.text


def test_oldest_wait_counts_the_oldest_unleased_entry(q, clock):
    assert q.oldest_wait(5000.0, LEASE_S) == 0
    for _ in range(3):
        q.submit("r", "/m", lambda sid: "/a")
    aged(q, "r.0001", 1000.0)
    aged(q, "r.0002", 4000.0)
    aged(q, "r.0003", 3000.0)
    assert q.oldest_wait(5000.0, LEASE_S) == 4000.0
    assert q.claim("A", LEASE_S, never).entry.submission_id == "r.0001"
    assert q.oldest_wait(5000.0, LEASE_S) == 2000.0  # r.0001 leased: r.0003 the oldest waiting


def test_holder_id_names_role_host_and_process():
    assert holder_id("grader") == f"grader@{socket.gethostname()}:{os.getpid()}"


def test_renew_leaves_an_unreadable_lease_for_the_next_renewal_and_counts_it(q, monkeypatch, caplog):
    monkeypatch.setattr(retries_mod, "time", FakeClock())  # retries back off on virtual time
    sid = q.submit("r", "/m", lambda sid: "/a").submission_id
    q.claim("A", LEASE_S, never)
    lease = q.leases / f"{sid}.json"
    lease.write_text(lease.read_text()[:40])  # torn: half a JSON object, as a stale page reads
    before = RETRIES.counts["lease"]
    with caplog.at_level(logging.WARNING):
        assert q.renew(sid, "A", LEASE_S) is True  # left for the next renewal, not given up
    assert RETRIES.counts["lease"] == before + retries_mod.ATTEMPTS  # every failed read, counted as a lease's
    last = caplog.records[-1].getMessage()
    assert last.startswith("retrying a read of a lease: ") and str(lease) in last
    lease.write_text(json.dumps({"schema_version": Lease.SCHEMA, "holder": 3}))  # whole, but no lease
    with pytest.raises(RecordError):
        q.renew(sid, "A", LEASE_S)


def test_a_lease_without_released_is_released_only_when_it_was_given_back():
    old = {"submission_id": "r.0001", "holder": "g", "claimed_at": 1.0, "expires_at": 0.0, "attempt": 1}
    now = {**old, "schema_version": Lease.SCHEMA}
    assert upgrade("Lease", {**old, "schema_version": 1}, Lease.SCHEMA) == {**now, "released": True}  # zeroed
    assert upgrade("Lease", {**old, "expires_at": 5.0, "schema_version": 1}, Lease.SCHEMA) == {
        **now,
        "expires_at": 5.0,
        "released": False,
    }


def test_unreadable_leases_and_entries_are_retried_and_counted_as_what_they_are(q, monkeypatch, caplog):
    monkeypatch.setattr(retries_mod, "time", FakeClock())
    sid = q.submit("r", "/m", lambda sid: "/a").submission_id
    q.claim("A", LEASE_S, never)
    lease = q.leases / f"{sid}.json"
    lease.write_text(lease.read_text()[:40])
    before = RETRIES.counts["lease"]
    with pytest.raises(RecordError):  # a release that cannot read the lease says so
        q.release(sid, "A")
    assert RETRIES.counts["lease"] == before + retries_mod.ATTEMPTS - 1
    torn = q.pending / "r.0002.json"
    torn.write_text((q.pending / f"{sid}.json").read_text()[:40])
    before = RETRIES.counts["queue entry"]
    with caplog.at_level(logging.WARNING, "a2rl.queue"):
        assert [e.submission_id for e in q.entries("r")] == [sid]  # the torn one skipped, with a warning
    assert RETRIES.counts["queue entry"] == before + retries_mod.ATTEMPTS - 1
    assert any(r.getMessage().startswith(f"cannot read QueueEntry from {torn}: ") for r in caplog.records)


def test_oldest_wait_skips_entries_whose_lease_does_not_read(q):
    for _ in range(9):
        q.submit("r", "/m", lambda sid: "/a")
    aged(q, "r.0005", 1000.0)
    for n in (1, 2, 3, 4, 6, 7, 8, 9):  # whole, but no lease: never transient
        (q.leases / f"r.{n:04d}.json").write_text(json.dumps({"schema_version": Lease.SCHEMA, "holder": 3}))
        aged(q, f"r.{n:04d}", 4000.0)
    assert q.oldest_wait(5000.0, LEASE_S) == 4000.0  # r.0005, wherever the listing puts it


def test_an_entry_retired_while_listed_is_skipped_silently(q, monkeypatch, caplog):
    sid = q.submit("r", "/m", lambda sid: "/a").submission_id
    real_retried = queue_mod.retried

    def retried(read, what):
        (q.pending / f"{sid}.json").unlink(missing_ok=True)  # another grader retires it between listing and reading
        return real_retried(read, what)

    monkeypatch.setattr(queue_mod, "retried", retried)
    with caplog.at_level(logging.WARNING):
        assert q.entries("r") == []
    assert caplog.records == []


def test_an_unreadable_lease_expires_like_a_silent_one_and_is_counted(q, clock, monkeypatch):
    monkeypatch.setattr(retries_mod, "time", FakeClock())
    sid = q.submit("r", "/m", lambda sid: "/a").submission_id
    q.claim("A", LEASE_S, never)
    lease = q.leases / f"{sid}.json"
    lease.write_text(lease.read_text()[:40])  # torn, and stays so
    before = RETRIES.counts["lease"]
    assert q.claim("B", LEASE_S, never) is None  # first seen unreadable: not free
    assert RETRIES.counts["lease"] == before + retries_mod.ATTEMPTS
    clock.advance(LEASE_S - 0.5)
    assert q.claim("B", LEASE_S, never) is None and q.oldest_wait(1e12, LEASE_S) == 0
    clock.advance(0.5)
    taken = q.claim("B", LEASE_S, never)
    assert (taken.lease.holder, taken.lease.attempt) == ("B", 1)  # the torn lease's attempts unknown: a first
    lease.write_text(json.dumps({"schema_version": Lease.SCHEMA, "holder": 3}))  # whole, but no lease
    with pytest.raises(RecordError):
        q.claim("C", LEASE_S, never)


def test_a_torn_entry_is_left_for_the_next_claim_and_counted_not_rejected(q, monkeypatch, caplog):
    monkeypatch.setattr(retries_mod, "time", FakeClock())
    good = q.submit("r", "/m", lambda sid: "/a")
    (q.pending / "r.0002.json").write_text((q.pending / "r.0001.json").read_text()[:40])
    aged(q, "r.0002", 1)  # first in line
    before = RETRIES.counts["queue entry"]
    with caplog.at_level(logging.WARNING, "a2rl.queue"):
        assert q.claim("A", LEASE_S, never).entry.submission_id == good.submission_id
    assert RETRIES.counts["queue entry"] == before + retries_mod.ATTEMPTS
    assert (q.pending / "r.0002.json").exists() and list(q.rejected.iterdir()) == []
    assert "rejected" not in caplog.text
    assert not (q.leases / "r.0002.json").exists()  # no lease taken on what did not read


def test_the_queue_layout_on_disk_and_its_defaults(tmp_path):
    root = tmp_path / "sweep" / "queue"  # parents made
    q = SubmissionQueue(root, KEY)
    assert sorted(p.name for p in root.iterdir()) == ["done", "leases", "pending", "rejected", "seq"]
    sid = q.submit("r", "/m", lambda sid: "/a").submission_id
    assert (root / "pending" / f"{sid}.json").is_file() and (root / "seq" / "r").read_text() == "1"
    assert (root / ".lock").exists()  # the lock file every change takes
    assert q.watch is queue_mod.WATCH  # this process's memory of leases, shared by its readers
    again = SubmissionQueue(root, KEY, lock_timeout_s=7.0)  # over an existing queue
    assert again.pending_ids() == [sid] and again._lock.timeout == 7.0 and q._lock.timeout == 120.0
