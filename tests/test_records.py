"""a2rl/records.py through its public API (issue 36): a record's file is written whole or not at all, read back
only at its own version or through its upgrade steps (a2rl/upgrades.py), refused in one line naming the file
otherwise; `publish_once` leaves exactly one; `read_many` keeps order and errors whether it reads in one thread
or several; a full disk is told apart from other errors. Test-local records carry their own versions (never the
real records', which change)."""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
from pathlib import Path
from typing import ClassVar

import pytest

from a2rl import records, upgrades
from a2rl.records import (
    Record,
    RecordError,
    StorageFull,
    atomic_write_text,
    disk_full,
    missing,
    read_bytes,
    read_many,
    sha256_file,
    while_full,
)
from fakes import FakeClock


class Item(Record):
    SCHEMA: ClassVar[str] = "1.2"
    name: str
    size: int = 0


class Grown(Item):
    """Version 1.1 called `size` `n` (the step below); 1.0 has no step."""


@pytest.fixture(autouse=True)
def grown_steps(monkeypatch):
    steps = {"Grown": {"1.1": ("1.2", lambda d: {"name": d["name"], "size": d["n"]})}}
    monkeypatch.setattr(upgrades, "STEPS", steps)


def written(path, **data) -> None:
    path.write_text(json.dumps(data))


def test_dump_writes_sorted_json_stamped_with_the_version_and_no_temp(tmp_path):
    path = tmp_path / "new" / "dir" / "item.json"
    Item(name="a", size=2).dump(path)
    assert path.read_text() == '{\n "name": "a",\n "schema_version": "1.2",\n "size": 2\n}\n'
    assert os.listdir(path.parent) == ["item.json"]
    rec = Item.load(path)
    assert (rec.name, rec.size, rec.schema_version) == ("a", 2, Item.SCHEMA)


def test_while_it_is_written_the_temp_file_is_hidden_beside_it(tmp_path, monkeypatch):
    """A reader listing the directory mid-write sees a dot file ending .tmp, never a second *.json."""
    path = tmp_path / "item.json"
    seen = []
    real_fsync = os.fsync
    monkeypatch.setattr(records.os, "fsync", lambda fd: seen.append(os.listdir(tmp_path)) or real_fsync(fd))
    Item(name="a").dump(path)
    Item(name="b").publish_once(tmp_path / "other.json")
    assert [len(names) for names in seen] == [1, 2]  # the temp, then item.json and the temp
    temps = [n for names in seen for n in names if n not in ("item.json",)]
    assert len(temps) == 2 and all(n.endswith(".tmp") for n in temps)
    assert temps[0].startswith(".item.json.") and temps[1].startswith(".other.json.")


def test_a_failed_write_leaves_the_old_file_and_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "item.json"
    atomic_write_text(path, "old")

    def fail(fd):
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(records.os, "fsync", fail)
    with pytest.raises(OSError, match="I/O error"):
        Item(name="a").dump(path)
    assert os.listdir(tmp_path) == ["item.json"] and path.read_text() == "old"


def test_load_refuses_missing_garbled_foreign_and_misshapen_files_in_one_line(tmp_path):
    path = tmp_path / "item.json"
    with pytest.raises(RecordError, match=r"cannot read Item from .*item\.json") as e:
        Item.load(path)
    assert missing(e.value) and Item.load_or_none(path) is None
    path.write_text("{not json")
    with pytest.raises(RecordError, match=r"cannot read Item from .*item\.json: ") as e:
        Item.load_or_none(path)
    assert not missing(e.value)
    refusals = {
        99: "Item version 99 is older than any a2rl 1.x reads",  # an int: a 0.x version this class never had
        "1.3": r"Item version 1.3 is newer than this a2rl reads \(1.2\): upgrade a2rl",
        "2.0": r"Item version 2.0 is newer than this a2rl reads",
        "1.1": r"Item version 1.1 has no upgrade step to 1.2",
        "one": "Item schema_version 'one' is not a record version",
        None: "Item schema_version None is not a record version",
    }
    for version, why in refusals.items():
        written(path, name="a", schema_version=version)
        with pytest.raises(RecordError, match=rf"item\.json: {why}"):
            Item.load(path)
    written(path, name="a", size="big", schema_version=Item.SCHEMA)
    with pytest.raises(RecordError, match=r"item\.json: not a valid Item: 1 validation error for Item$"):
        Item.load(path)
    path.write_text("[1, 2]")
    with pytest.raises(RecordError, match=r"item\.json: not a Item \(a JSON list, not an object\)$"):
        Item.load(path)


def test_a_directory_in_the_way_counts_as_missing(tmp_path):
    (tmp_path / "file").write_text("x")
    assert Item.load_or_none(tmp_path / "file" / "item.json") is None
    with pytest.raises(RecordError) as e:
        Item.load_or_none(tmp_path)  # a directory, not a record: an error, not "missing"
    assert not missing(e.value)


def test_load_takes_the_bytes_or_the_error_the_caller_read(tmp_path):
    path = tmp_path / "item.json"  # never there: the bytes given are read, not the file
    raw = Item(name="a", size=1).model_dump_json().replace('"schema_version":0', '"schema_version":"1.2"').encode()
    assert Item.load(path, raw).size == 1
    assert Item.load_or_none(path, FileNotFoundError(errno.ENOENT, "gone")) is None
    with pytest.raises(RecordError, match="cannot read Item from .*: .*torn") as e:
        Item.load(path, OSError(errno.EIO, "torn"))
    assert isinstance(e.value.__cause__, OSError)


def test_an_older_version_is_read_through_upgrade_others_are_refused(tmp_path):
    path = tmp_path / "item.json"
    written(path, name="a", n=7, schema_version="1.1")
    rec = Grown.load(path)
    assert (rec.name, rec.size, rec.schema_version) == ("a", 7, Grown.SCHEMA)
    for version in ("1.0", 1, 0, -1):  # no step from these
        written(path, name="a", n=7, schema_version=version)
        with pytest.raises(RecordError, match=f"Grown (schema_)?version {version}"):
            Grown.load(path)
    written(path, name="a", n=7, schema_version="1.1")
    with pytest.raises(RecordError, match="Item version 1.1 has no upgrade step to 1.2"):
        Item.load(path)  # the steps are per record class
    written(path, name="a", n="x", schema_version="1.1")
    with pytest.raises(RecordError, match="not a valid Grown"):
        Grown.load(path)


def test_an_upgrade_sees_the_old_fields_and_its_version(tmp_path):
    seen = []

    class Spy(Item):
        pass

    def step(data: dict) -> dict:
        seen.append(dict(data))
        return {"name": data["name"]}

    upgrades.STEPS["Spy"] = {"1.0": ("1.1", step), "1.1": ("1.2", step)}
    path = tmp_path / "item.json"
    written(path, name="a", schema_version="1.0")
    assert Spy.load(path).size == 0
    assert seen == [{"name": "a", "schema_version": "1.0"}, {"name": "a", "schema_version": "1.1"}]


def test_upgrade_refusals_name_the_versions_read_and_a_v1_lease_reads_as_released_or_not():
    def refused(kind: str, version: object, target: str = "1.0") -> str:
        with pytest.raises(upgrades.UpgradeError) as e:
            upgrades.upgrade(kind, {"schema_version": version}, target)
        return str(e.value)

    fix = "; rerun what wrote it with a2rl 1.x"
    assert refused("Lease", 3) == f"Lease version 3 is older than any a2rl 1.x reads (0.x versions read: 1, 2){fix}"
    assert (
        refused("FrozenScan", 1)
        == f"FrozenScan version 1 is older than any a2rl 1.x reads (0.x versions read: none){fix}"
    )
    assert refused("Unknown", 4).endswith("(0.x versions read: none)" + fix)
    # "1.00" is 1.0's number but not its spelling: never read as newer, refused as a version without a step
    assert refused("Lease", "1.00") == "Lease version 1.00 has no upgrade step to 1.0 (a2rl/upgrades.py STEPS)"
    # a target that is no version (a class's SCHEMA misspelt): every version is beyond it, none read
    assert (
        refused("Lease", "0.1", "one")
        == "Lease version 0.1 is newer than this a2rl reads (one): upgrade a2rl to read it"
    )
    # version 1 of a lease had no `released`: its release set expires_at to 0
    for expires_at, released in ((0.0, True), (12.5, False)):
        data = {"schema_version": 1, "expires_at": expires_at}
        assert upgrades.upgrade("Lease", data, "1.0") == {**data, "released": released, "schema_version": "1.0"}


def test_publish_once_leaves_the_first_writers_record(tmp_path):
    path = tmp_path / "d" / "item.json"
    assert Item(name="first").publish_once(path) is True
    assert Item(name="second").publish_once(path) is False
    assert Item.load(path).name == "first"
    assert json.loads(path.read_text())["schema_version"] == Item.SCHEMA
    assert os.listdir(path.parent) == ["item.json"]


def test_read_bytes_reads_past_one_chunk(tmp_path):
    path = tmp_path / "big"
    data = os.urandom((1 << 16) * 2 + 5)
    path.write_bytes(data)
    assert read_bytes(path) == data
    (tmp_path / "empty").write_bytes(b"")
    assert read_bytes(tmp_path / "empty") == b""


def test_sha256_file_hashes_the_whole_file(tmp_path):
    path = tmp_path / "big"
    data = os.urandom((1 << 20) + 3)
    path.write_bytes(data)
    assert sha256_file(path) == hashlib.sha256(data).hexdigest()


@pytest.fixture
def files(tmp_path):
    paths = []
    for i in range(11):
        p = tmp_path / f"f{i}"
        if i % 4 != 3:  # every fourth is missing: its error stands in its place
            p.write_bytes(f"content {i}".encode())
        paths.append(p)
    return paths


def check_read(paths, got) -> None:
    assert len(got) == len(paths)
    for p, g in zip(paths, got):
        if p.exists():
            assert g == p.read_bytes()
        else:
            assert isinstance(g, FileNotFoundError) and g.filename == str(p)


@pytest.mark.parametrize(
    "start, elapsed, threaded", [(0.0, 1.0, False), (0.0, 1.0001, True), (0.0, 100.0, True), (1000.0, 0.5, False)]
)
def test_read_many_threads_only_when_the_probe_came_slowly(files, monkeypatch, start, elapsed, threaded):
    """The probe's reads took `elapsed` times SLOW_READ_S each (a fake clock from `start`): threads past that, not
    at it."""
    ticks = iter([start, start + elapsed * records.SLOW_READ_S * 4])
    monkeypatch.setattr(records.time, "perf_counter", lambda: next(ticks))
    pools = []
    real_pool = records.ThreadPoolExecutor

    def pool(n):
        pools.append(n)
        return real_pool(n)

    monkeypatch.setattr(records, "ThreadPoolExecutor", pool)
    check_read(files, read_many(files, threads=3, probe=4))
    assert pools == ([3] if threaded else [])


def test_read_many_reads_everything_when_the_probe_is_all(files, monkeypatch):
    monkeypatch.setattr(records, "ThreadPoolExecutor", lambda n: pytest.fail("threads for nothing"))
    check_read(files, read_many(files, probe=64))
    assert read_many([]) == []


def test_read_many_by_default_probes_64_files_then_uses_16_threads(tmp_path, monkeypatch):
    paths = []
    for i in range(65):
        (p := tmp_path / f"f{i}").write_bytes(b"%d" % i)
        paths.append(p)
    monkeypatch.setattr(records, "SLOW_READ_S", -1.0)  # always slow
    pools = []
    monkeypatch.setattr(records, "ThreadPoolExecutor", lambda n: pools.append(n) or records.ThreadPoolExecutor(n))
    assert read_many(paths[:64]) == [p.read_bytes() for p in paths[:64]] and pools == []
    monkeypatch.undo()
    monkeypatch.setattr(records, "SLOW_READ_S", -1.0)
    real_pool = records.ThreadPoolExecutor
    monkeypatch.setattr(records, "ThreadPoolExecutor", lambda n: pools.append(n) or real_pool(n))
    assert read_many(paths) == [p.read_bytes() for p in paths] and pools == [16]


def test_disk_full_is_no_space_or_no_quota_anywhere_in_the_chain():
    assert disk_full(OSError(errno.ENOSPC, "full")) and disk_full(OSError(errno.EDQUOT, "quota"))
    assert not disk_full(OSError(errno.EIO, "io")) and not disk_full(ValueError("x"))
    try:
        try:
            raise OSError(errno.EDQUOT, "quota")
        except OSError as inner:
            raise RuntimeError("writing") from inner
    except RuntimeError as e:
        assert disk_full(e)
    chained = RecordError("x")
    chained.__cause__ = ValueError("y")
    assert not disk_full(chained)


def test_while_full_gives_up_after_an_hour_by_default_and_says_when_it_wrote(caplog):
    clock = FakeClock()
    full = OSError(errno.ENOSPC, "No space left on device")

    def never():
        raise full

    with pytest.raises(StorageFull, match=r"^\[Errno 28\] the ledger: the file system stayed full for 3600 s \(No sp"):
        while_full(never, "the ledger", sleep=clock.sleep, clock=clock.monotonic)
    assert clock.now == 1000.0 + 3600.0  # it waited exactly give_up_s, FULL_RETRY_S at a time
    tries = iter([full, full, "ok"])

    def twice():
        if isinstance(r := next(tries), OSError):
            raise r
        return r

    start = clock.now
    with caplog.at_level(logging.INFO, logger="a2rl.records"):
        assert while_full(twice, "the ledger", sleep=clock.sleep, clock=clock.monotonic) == "ok"
    assert clock.now == start + 2 * records.FULL_RETRY_S
    said = [r.getMessage() for r in caplog.records if r.name == "a2rl.records"]
    assert said[-1] == "the ledger: written after waiting 10 s for space"
    assert said[0] == ("the ledger: no space left on the file system (No space left on device); retrying every 5 s")


class Located(Record):
    SCHEMA: ClassVar[str] = "1.2"
    where: Path
    shape: tuple[int, int]


def test_a_record_is_written_as_json_and_its_line_is_the_same_fields(tmp_path):
    rec = Located(where=tmp_path / "x", shape=(2, 3))
    rec.dump(tmp_path / "r.json")  # a Path and a tuple become JSON's string and list
    on_disk = json.loads((tmp_path / "r.json").read_text())
    assert on_disk == {"where": str(tmp_path / "x"), "shape": [2, 3], "schema_version": "1.2"}
    line = rec.json_line()
    assert line.endswith("}\n") and line.count("\n") == 1 and json.loads(line) == on_disk


def test_load_or_none_reads_the_bytes_it_is_given_not_the_file(tmp_path):
    path = tmp_path / "item.json"
    Item(name="on disk").dump(path)
    given = Item(name="given").model_dump_json().replace('"schema_version":0', '"schema_version":"1.2"').encode()
    assert Item.load_or_none(path, given).name == "given"


def test_a_record_sees_its_fields_as_the_file_held_them_before_any_upgrade(tmp_path):
    seen = []

    class Watched(Item):
        def _read_from(self, original: dict) -> None:
            seen.append(original)

    upgrades.STEPS["Watched"] = {"1.1": ("1.2", lambda d: {"name": d["old_name"]})}
    path = tmp_path / "item.json"
    written(path, old_name="a", schema_version="1.1")
    assert Watched.load(path).name == "a"
    assert seen == [{"old_name": "a", "schema_version": "1.1"}]  # what a signature was made over


def test_while_full_warns_again_each_minute_on_the_dot(caplog):
    clock = FakeClock()
    full = OSError(errno.ENOSPC, "No space left on device")
    tries = iter([full] * 13 + ["ok"])  # full from 0 s to 60 s, every FULL_RETRY_S (5 s), then room

    def write():
        if isinstance(r := next(tries), OSError):
            raise r
        return r

    with caplog.at_level(logging.INFO, logger="a2rl.records"):
        assert while_full(write, "the ledger", sleep=clock.sleep, clock=clock.monotonic) == "ok"
    said = [r.getMessage() for r in caplog.records if r.name == "a2rl.records"]
    assert [m.startswith("the ledger: no space left") for m in said] == [True, True, False]  # at 0 s and 60 s
