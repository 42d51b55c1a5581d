"""The ledger (store/ledger.py) on its own: one signed entry per submission, the first result standing; entries
that do not verify, do not parse or lie under another name skipped and reported once; the run's final entry apart
from its submissions; Lineage's one-line summary; `listed` sees an entry another FUSE view wrote, where a lookup by
name keeps answering from the view's negative cache."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from a2rl.records import Record
from a2rl.store.ledger import Ledger, LedgerEntry, Lineage

KEY = b"k" * 32


def entry(sid: str = "r.0001", seq: int = 1, score: float = 50.0, **fields) -> LedgerEntry:
    return LedgerEntry(
        submission_id=sid,
        run_id=sid.rsplit(".", 1)[0],
        seq=seq,
        submitted_at=0,
        claimed_at=0,
        graded_at=0,
        status="scored",
        score=score,
        model_path="m",
        task="arith",
        protocol="a2rl",
        evaluator_version=1,
        grader="g",
        attempt=1,
        **fields,
    )


def same(a: LedgerEntry | None, b: LedgerEntry) -> bool:
    """Equal but for the schema version the file stamps."""
    return a is not None and a.model_dump(exclude={"schema_version"}) == b.model_dump(exclude={"schema_version"})


@pytest.fixture
def ledger(tmp_path) -> Ledger:
    return Ledger(tmp_path / "ledger", KEY)


def test_an_entry_is_recorded_once_under_its_run_and_the_first_stands(ledger):
    first = entry("sweep.a.r1.0003", seq=3, score=40)
    assert not ledger.has(first.submission_id) and ledger.get(first.submission_id) is None
    assert ledger.record(first) is True
    assert ledger.path(first.submission_id) == ledger.root / "sweep.a.r1" / "sweep.a.r1.0003.json"
    assert ledger.path(first.submission_id).is_file()
    assert ledger.record(entry("sweep.a.r1.0003", seq=3, score=90)) is False  # graded twice: the first stands
    got = ledger.get(first.submission_id)
    assert same(got, first) and got.score == 40 and got.hmac is not None and ledger.has(first.submission_id)
    assert ledger.problems == []


def test_entries_come_by_seq_per_run_and_all_runs_in_order(ledger):
    for sid, seq in (("b.0001", 2), ("b.0002", 1), ("a.0001", 1)):
        ledger.record(entry(sid, seq=seq))
    ledger.record_final(entry("b.0001", seq=2, part="final"))  # not one of the run's submissions
    assert [e.submission_id for e in ledger.entries("b")] == ["b.0002", "b.0001"]
    assert [e.submission_id for e in ledger.all_entries()] == ["a.0001", "b.0002", "b.0001"]
    assert ledger.entries("none") == []


def test_unsigned_garbage_and_misplaced_entries_are_skipped_reported_once_and_replaced(ledger, caplog):
    unsigned = entry("r.0001")
    path = ledger.path(unsigned.submission_id)
    path.parent.mkdir(parents=True)
    unsigned.dump(path)  # written without the sweep's key
    ledger.path("r.0002").write_text("{not json")
    # a signed entry copied under another submission's name
    ledger.record(entry("r.0003", seq=3))
    ledger.path("r.0004").write_bytes(ledger.path("r.0003").read_bytes())
    with caplog.at_level(logging.WARNING, "a2rl.ledger"):
        for _ in range(2):
            assert [e.submission_id for e in ledger.entries("r")] == ["r.0003"]
            assert ledger.get("r.0001") is None and ledger.get("r.0004") is None
    assert len(ledger.problems) == 3  # each once, however often read
    assert any("is unsigned" in p and str(path) in p for p in ledger.problems)
    assert any(str(ledger.path("r.0002")) in p for p in ledger.problems)
    assert f"{ledger.path('r.0004')}: holds the entry of r.0003: ignored" in ledger.problems
    assert [r.getMessage() for r in caplog.records] == ledger.problems
    # a grader recording the submission replaces what no grader of this sweep signed
    with caplog.at_level(logging.WARNING, "a2rl.ledger"):
        assert ledger.record(entry("r.0001", score=70)) is True
    assert f"replacing {path}: it was not written by a grader of this sweep" in [r.getMessage() for r in caplog.records]
    assert ledger.get("r.0001").score == 70 and ledger.record(entry("r.0001", score=10)) is False


def test_the_final_entry_once_per_run_apart_and_checked(ledger):
    assert ledger.final("r") is None
    final = entry("r.0002", seq=2, score=55, part="final")
    assert ledger.final_path("r") == ledger.root / "r" / "final" / "r.json"
    assert ledger.record_final(final) is True
    assert ledger.record_final(entry("r.0003", seq=3, score=99, part="final")) is False
    assert same(ledger.final("r"), final) and ledger.entries("r") == [] and ledger.problems == []
    # an entry that is not this run's final one, though signed, is not taken for it
    ledger.final_path("s").parent.mkdir(parents=True)
    ledger.final_path("s").write_bytes(ledger.final_path("r").read_bytes())
    feedback = entry("t.0001")
    ledger.final_path("t").parent.mkdir(parents=True)
    feedback.sign(KEY).dump(ledger.final_path("t"))
    assert ledger.final("s") is None and ledger.final("t") is None
    assert ledger.problems == [
        f"{ledger.final_path('s')}: not the final entry of s: ignored",
        f"{ledger.final_path('t')}: not the final entry of t: ignored",
    ]
    # unsigned: reported, and replaced by the grader's
    entry("u.0001", part="final").dump(ledger.final_path("u"))
    assert ledger.final("u") is None and "is unsigned" in ledger.problems[-1]
    assert ledger.record_final(entry("u.0001", score=1, part="final")) is True and ledger.final("u").score == 1


def test_a_signed_entry_reads_back_whole(ledger):
    lineage = Lineage(verdict="foreign", reason="r", close_share=0.0, cosine_median=0.01, rel_l2_median=None)
    e = entry("r.0001", lineage=lineage, leaks=["canary in x"], details={"n": 3})
    ledger.record(e)
    data = json.loads(ledger.path("r.0001").read_text())
    assert data["schema_version"] == LedgerEntry.SCHEMA and data["hmac"] == e.hmac
    assert same(ledger.get("r.0001"), e) and ledger.get("r.0001").foreign
    assert isinstance(e, Record)


def test_foreign_and_the_lineage_summary():
    assert not entry().foreign and not entry(lineage=Lineage(verdict="copy", reason="x")).foreign
    assert not entry(lineage=Lineage(verdict="derived", reason="x")).foreign
    assert entry(lineage=Lineage(verdict="foreign", reason="x")).foreign
    assert Lineage(verdict="copy", reason="the base", close_share=1.0).summary() == "copy: the base"
    assert Lineage(verdict="foreign", reason="its tokenizer differs").summary() == "foreign: its tokenizer differs"
    full = Lineage(verdict="derived", reason="why", close_share=1.0, cosine_median=0.12345, rel_l2_median=0.5)
    assert full.summary() == "derived: why (median cosine 0.123, median relative L2 0.500)"
    no_rel = Lineage(verdict="foreign", reason="why", close_share=0.0, cosine_median=0.0)
    assert no_rel.summary() == "foreign: why (median cosine 0.000)"


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("bindfs") is None or not Path("/dev/fuse").exists(),
    reason="mounts two FUSE views (bindfs): needs root, bindfs and /dev/fuse (tools/test.sh installs bindfs)",
)
def test_listed_sees_an_entry_written_through_another_view_despite_negative_caching(tmp_path):
    common, a, b = tmp_path / "common", tmp_path / "a", tmp_path / "b"
    for d in (common, a, b):
        d.mkdir()
    (common / "r").mkdir()  # the run's ledger folder, made when the sweep is (SweepDir.create)
    caching = ["-o", "attr_timeout=30,entry_timeout=30,negative_timeout=30"]  # as an NFS client caches
    for view in (a, b):
        subprocess.run(["bindfs", "--multithreaded", *caching, str(common), str(view)], check=True, timeout=30)
    try:
        grader, job = Ledger(a, KEY), Ledger(b, KEY)
        assert job.listed("r.0001") is None and job.get("r.0002") is None  # polled before the grader records
        grader.record(entry())
        grader.record(entry("r.0002", seq=2))
        assert job.get("r.0002") is None  # looked up by name while missing: still missing, from b's cache
        seen = job.listed("r.0001")
        assert seen is not None and (seen.submission_id, seen.score) == ("r.0001", 50.0)
    finally:
        for view in (a, b):
            subprocess.run(["umount", str(view)], timeout=60)
