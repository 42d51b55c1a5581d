"""Record format 1.0 (docs/development.md, "Record formats"): the committed fixture sweeps (tests/fixtures/sweeps/,
built by tools/fixtures/build_sweep.py) print the stored outputs of `status`, `aggregate` (every layout, format
and view), `report` and `inspect --show` (tools/fixtures/expected.py --update stores them); the sweep of the
release before 1.0 prints the same before and after `a2rl migrate`; and the upgrade policy holds for every record
class and every version that release wrote. Records only: no job, no model."""

from __future__ import annotations

import difflib
import json
import os
import re
import socket
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from a2rl import upgrades
from a2rl.cli.main import main
from a2rl.records import Record, RecordError, now
from a2rl.scheduling import migrate as migrate_module
from a2rl.scheduling.migrate import BACKUP_DIR, KINDS, Migration, SweepAtWork, at_work, migrate, record_files
from a2rl.spec.sweep import load_sweep
from a2rl.store.integrity import SignedRecord
from a2rl.store.ledger import LedgerEntry
from a2rl.store.sweepdir import STALE_S, GraderBeat, RunStatus, SweepDir
from conftest import REPO

sys.path.insert(0, str(REPO / "tools/fixtures"))
import expected  # noqa: E402

PRE = expected.SWEEPS / "pre-1.0"


def same_as_stored(found: dict[str, str], fixture: str) -> None:
    want = expected.stored(fixture)
    for name in expected.CASES:
        diff = "".join(difflib.unified_diff(want[name].splitlines(True), found[name].splitlines(True), n=1))
        assert not diff, f"{fixture}/{name} differs from its stored output (tools/fixtures/expected.py):\n{diff}"


def version_of(path: Path) -> list:
    lines = path.read_text().splitlines() if path.suffix == ".jsonl" else [path.read_text()]
    return [json.loads(line).get("schema_version") for line in lines if line.strip()]


def record_classes() -> set[type[Record]]:
    def below(c: type) -> set[type]:
        return {s for sub in c.__subclasses__() for s in {sub, *below(sub)}}

    return {c for c in below(Record) if c is not SignedRecord and c.__module__.startswith("a2rl.")}


def test_the_1_0_sweep_prints_the_stored_outputs_and_needs_no_migration(tmp_path, capsys):
    sweep = expected.copy_of("1.0", tmp_path)
    same_as_stored(expected.outputs(sweep), "1.0")
    files = record_files(sweep)
    assert files and all(set(version_of(p)) <= {cls.SCHEMA} for p, cls in files)
    assert main(["migrate", str(sweep)]) == 0
    assert capsys.readouterr().out.startswith(f"nothing to migrate: all {len(files)} record files in {sweep}")
    assert not (sweep / BACKUP_DIR).exists()


def test_the_release_before_reads_the_same_before_and_after_migrate(tmp_path, capsys):
    sweep = expected.copy_of("pre-1.0", tmp_path)
    same_as_stored(expected.outputs(sweep), "pre-1.0")  # upgraded as read, nothing written
    old = {p: p.read_bytes() for p, _ in record_files(sweep)}
    assert all(b == (PRE / p.relative_to(sweep)).read_bytes() for p, b in old.items())
    assert main(["migrate", str(sweep)]) == 0
    line = capsys.readouterr().out
    (backup,) = (sweep / BACKUP_DIR).iterdir()
    assert line.startswith("migrated ") and f"(originals in {backup})" in line and line.count("\n") == 1, line
    for path, cls in record_files(sweep):
        assert set(version_of(path)) <= {cls.SCHEMA}, path
        if path.read_bytes() != old[path]:  # rewritten: its original is in the backup, byte for byte
            assert (backup / path.relative_to(sweep)).read_bytes() == old[path]
        if issubclass(cls, SignedRecord):  # signed again with the sweep's key
            cls.load(path).verify(SweepDir(sweep).key, path)
    same_as_stored(expected.outputs(sweep), "pre-1.0")
    assert main(["migrate", str(sweep)]) == 0  # idempotent
    assert capsys.readouterr().out.startswith("nothing to migrate")
    assert len(list((sweep / BACKUP_DIR).iterdir())) == 1


def test_every_record_class_reads_each_version_the_release_before_wrote():
    classes = record_classes()
    assert {c.__name__ for c in classes} <= set(upgrades.PRE_1_0), "a record class without its 0.x versions"
    assert {c for _, c in KINDS} <= classes
    seen = set()
    for path, cls in record_files(PRE):
        for v in version_of(path):
            assert isinstance(v, int) and v in upgrades.PRE_1_0[cls.__name__], (path, v)
            seen.add(cls)
    # every JSON file of the fixture that holds a versioned record is one migrate finds
    found = {p for p, _ in record_files(PRE)}
    for path in PRE.rglob("*.json"):
        data = json.loads(path.read_text())
        if isinstance(data, dict) and "schema_version" in data:
            assert path in found, f"{path}: a record `a2rl migrate` does not know (scheduling/migrate.py KINDS)"
    assert len(seen) >= 15  # the fixture holds most kinds of record


def test_a_0x_int_is_never_taken_for_a_1x_version_and_newer_ones_are_refused(tmp_path):
    entry = next(PRE.glob("ledger/*/*.json"))
    data = json.loads(entry.read_text())
    assert isinstance(data["schema_version"], int)
    read = LedgerEntry.load(entry).verify(SweepDir(PRE).key, entry)  # upgraded, and its writer's signature holds
    assert read.schema_version == LedgerEntry.SCHEMA
    for version, why in [
        (1, "older than any a2rl 1.x reads"),  # the ledger's first 0.x version: refused by the release before too
        ("1", "is not a record version"),
        ("99.0", "newer than this a2rl reads"),
        (f"{LedgerEntry.SCHEMA}.1", "is not a record version"),
    ]:
        (tmp_path / "e.json").write_text(json.dumps({**data, "schema_version": version}))
        with pytest.raises(RecordError, match=why):
            LedgerEntry.load(tmp_path / "e.json")
    tampered = {**data, "score": 99.0}
    (tmp_path / "t.json").write_text(json.dumps(tampered))
    with pytest.raises(RecordError, match="does not verify"):
        LedgerEntry.load(tmp_path / "t.json").verify(SweepDir(PRE).key, tmp_path / "t.json")


class Probe(Record):
    SCHEMA = "1.2"
    count: int
    unit: str


def test_steps_chain_from_a_0x_version_through_each_1x_one(tmp_path, monkeypatch):
    """How a later release bumps a record: its SCHEMA, and a step from the version before in upgrades.py."""
    monkeypatch.setitem(upgrades.PRE_1_0, "Probe", {3: lambda d: {"count": d["n"]}})
    steps = {"1.0": ("1.1", lambda d: {**d, "unit": "items"}), "1.1": ("1.2", lambda d: {**d, "count": d["count"] * 2})}
    monkeypatch.setitem(upgrades.STEPS, "Probe", steps)
    for data, want in [
        ({"schema_version": 3, "n": 5}, (10, "items")),
        ({"schema_version": "1.1", "count": 4, "unit": "s"}, (8, "s")),
        ({"schema_version": "1.2", "count": 4, "unit": "s"}, (4, "s")),
    ]:
        (tmp_path / "p.json").write_text(json.dumps(data))
        got = Probe.load(tmp_path / "p.json")
        assert (got.count, got.unit, got.schema_version) == (*want, "1.2")
    for version, why in [("1.3", "newer than this a2rl reads"), ("0.9", "has no upgrade step to 1.2")]:
        (tmp_path / "p.json").write_text(json.dumps({"schema_version": version, "count": 1, "unit": "s"}))
        with pytest.raises(RecordError, match=why):
            Probe.load(tmp_path / "p.json")


def test_migrate_refuses_a_sweep_at_work_and_changes_nothing(tmp_path, capsys):
    sweep = expected.copy_of("pre-1.0", tmp_path)
    t = now()
    host, pid = socket.gethostname(), os.getpid()
    beat = GraderBeat(holder="grader9", host=host, pid=pid, started_at=t, heartbeat_at=t, graded=0, state="idle")
    beat.dump(sweep / "graders" / "grader9.json")
    before = {p: p.read_bytes() for p, _ in record_files(sweep)}
    assert main(["migrate", str(sweep)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {sweep} is at work (grader grader9)") and err.count("\n") == 1, err
    assert {p: p.read_bytes() for p, _ in record_files(sweep)} == before
    assert not (sweep / BACKUP_DIR).exists()


def test_a_run_is_at_work_while_its_job_beats_without_a_result(tmp_path):
    sweep = SweepDir(expected.copy_of("pre-1.0", tmp_path))
    a, b = (r.run_id for r in sweep.runs())
    host = socket.gethostname()
    old = now() - 10 * STALE_S
    for state, beat, result, busy in [
        ("running", now(), False, True),
        ("finishing", now(), False, True),
        ("running", old, False, False),  # its job died: nothing writes any more
        ("finished", now(), False, False),
        ("submitted", now(), False, False),  # queued: its job has not started
        ("running", now(), True, False),  # its result written
    ]:
        sweep.result_path(a).unlink(missing_ok=True)
        if result:
            sweep.result_path(a).write_bytes((PRE / "runs" / a / "result.json").read_bytes())
        RunStatus(run_id=a, state=state, heartbeat_at=beat, host=host).dump(sweep.run_dir(a) / "status.json")
        assert at_work(sweep) == ([a] if busy else []), (state, beat, result)
    sweep.result_path(b).unlink()
    RunStatus(run_id=b, state="running", heartbeat_at=now(), host=host).dump(sweep.run_dir(b) / "status.json")
    (sweep.run_dir(a) / "status.json").unlink()  # never started: no status
    assert at_work(sweep) == [b]


def test_migrate_names_three_at_work_and_what_it_left_as_it_was(tmp_path, monkeypatch):
    sweep = expected.copy_of("pre-1.0", tmp_path)
    t, host, pid = now(), socket.gethostname(), os.getpid()
    for i, more in ((0, ""), (1, ""), (2, ""), (3, " ...")):
        beat = GraderBeat(holder=f"g{i}", host=host, pid=pid, started_at=t, heartbeat_at=t, graded=0, state="idle")
        beat.dump(sweep / "graders" / f"grader{i}.json")
        with pytest.raises(SweepAtWork) as e:
            migrate(SweepDir(sweep))
        named = re.fullmatch(
            rf"{sweep} is at work \(((?:grader g\d(?:, )?)+){re.escape(more)}\): migrate it once it has stopped"
            r" \(`a2rl status` shows when; `a2rl cancel` stops it\)",
            str(e.value),
        )
        assert named and named[1].count("grader") == min(i + 1, 3), str(e.value)
    for i in range(4):
        (sweep / "graders" / f"grader{i}.json").unlink()
    entry = next(sweep.glob("ledger/*/*.json"))
    entry.write_text(json.dumps({**json.loads(entry.read_text()), "score": 99.0}))  # forged: never signed again
    garbled = sweep / "runs" / next(iter(os.listdir(sweep / "runs"))) / "run.json"
    garbled.write_text("{")
    (sweep / "noise").mkdir()
    (sweep / "noise" / "linked.json").symlink_to(entry)  # a link is no record of the sweep: never read nor written
    (sweep / "noise" / "dir.json").mkdir()
    listed = next(sweep.glob("runs/*/env-*.json"))
    listed.write_text("[1]")  # JSON, not a record
    m = migrate(SweepDir(sweep), stamp="T")
    assert m.backup == sweep / BACKUP_DIR / "T" and len(m.left) == 3, m.left
    assert [why for why in m.left if str(entry) in why and "does not verify" in why]
    assert [why for why in m.left if str(garbled) in why] and [w for w in m.left if str(listed) in w]
    assert m.summary() == (
        f"migrated {len(m.migrated)} of {len(m.migrated) + m.current} record files in {sweep} to this a2rl's versions"
        f" (originals in {m.backup}); left 3 as they are: {'; '.join(m.left)}"
    )
    assert json.loads(entry.read_text())["score"] == 99.0 and garbled.read_text() == "{"
    assert m.migrated and all((m.backup / p.relative_to(sweep)).is_file() for p in m.migrated)
    assert not {sweep / "noise" / "linked.json", sweep / "noise" / "dir.json"} & {p for p, _ in record_files(sweep)}
    assert Migration(Path("/s"), Path("/b"), current=3).summary() == (
        "nothing to migrate: all 3 record files in /s are this a2rl's versions"
    )
    assert Migration(Path("/s"), Path("/b"), [Path("/s/a")], 2).summary() == (
        "migrated 1 of 3 record files in /s to this a2rl's versions (originals in /b)"
    )
    monkeypatch.setattr(migrate_module, "time", SimpleNamespace(strftime=time.strftime, gmtime=lambda: time.gmtime(0)))
    again = migrate(SweepDir(sweep))  # the originals would go under the UTC time
    assert again.backup == sweep / BACKUP_DIR / "19700101T000000Z"
    assert again.summary() == (
        f"nothing to migrate: all {again.current} record files in {sweep} are this a2rl's versions;"
        f" left 3 as they are: {'; '.join(again.left)}"
    )


@pytest.mark.parametrize("fixture", expected.FIXTURES)
def test_the_sweep_files_written_for_1_0_and_before_still_validate(tmp_path, fixture):
    """The other half of the promise: a sweep.yaml written for 1.0 keeps validating (its agent path made this
    checkout's: the fixture was built in another)."""
    spec = yaml.safe_load((expected.SWEEPS / fixture / "sweep.yaml").read_text())
    spec["agent_paths"] = [str(REPO / "tests/fixtures/agents")]
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    loaded = load_sweep(tmp_path / "sweep.yaml")
    assert [a.name for a in loaded.agents] == ["submitter", "sleeper"] and loaded.inspector is not None
