"""store/integrity.py on its own (issue 36): the sweep's key file (written once, whole, 0600; a short or garbled one
refused) and the HMAC over a record's canonical JSON that every ledger entry, queue entry, result and baseline
carries. A test-local record pins the signature's bytes, so a change to the canonical form (which would make every
record an older a2rl signed unverifiable) fails here."""

from __future__ import annotations

import errno
import hashlib
import hmac
import json
import os
import stat
from pathlib import Path
from typing import ClassVar

import pytest

from a2rl.records import RecordError
from a2rl.store import integrity
from a2rl.store.integrity import KEY_BYTES, KEY_FILE, ForgedRecord, SignedRecord, create_key, read_key
from a2rl.store.retries import RETRIES

KEY = bytes(range(KEY_BYTES))


class Probe(SignedRecord):
    SCHEMA: ClassVar[int] = 3  # its own version: independent of the real records' (which change)
    name: str
    n: int = 0
    tags: list[str] = []


def test_the_key_is_written_once_whole_and_readable_only_by_its_owner(tmp_path):
    d = tmp_path / "a" / "b"  # created with its parents
    create_key(d)
    path = d / KEY_FILE
    text = path.read_text()
    assert len(bytes.fromhex(text)) == KEY_BYTES and text == text.strip()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(p.name for p in d.iterdir()) == [KEY_FILE]  # no temp file left behind
    create_key(d)  # a second creator keeps the first key
    assert path.read_text() == text
    assert read_key(d) == bytes.fromhex(text)


def test_the_key_is_written_under_a_hidden_temporary_name_beside_it(tmp_path, monkeypatch):
    """Whole or not at all: written under .a2rl-key.*.tmp in the same directory, then linked to its name."""
    seen = []
    real_fsync = os.fsync
    monkeypatch.setattr(integrity.os, "fsync", lambda fd: seen.append(os.listdir(tmp_path)) or real_fsync(fd))
    create_key(tmp_path)
    (temp,) = seen[0]
    assert temp.startswith(f"{KEY_FILE}.") and temp.endswith(".tmp") and temp != KEY_FILE


def test_a_key_linked_by_another_creator_first_stands(tmp_path, monkeypatch):
    """Between the exists check and the link another node writes its key: the link fails, that key stands."""
    other = "ab" * KEY_BYTES
    real_link = os.link

    def racing_link(src, dst):
        with open(dst, "x") as f:
            f.write(other)
        return real_link(src, dst)

    monkeypatch.setattr(integrity.os, "link", racing_link)
    create_key(tmp_path)
    assert (tmp_path / KEY_FILE).read_text() == other
    assert [p.name for p in tmp_path.iterdir()] == [KEY_FILE]


@pytest.mark.parametrize(
    "content, match",
    [
        (None, "cannot read the signing key .*records there cannot be verified"),
        ("not hex at all", "cannot read the signing key"),
        (
            "ab" * 3,
            f"^the signing key .* holds 3 bytes, not {KEY_BYTES}: it was read half-written or was cut off; if no job of"
            " the sweep has signed with it yet, remove it and launch again, else restore it$",
        ),
        ("ab" * (KEY_BYTES + 1), f"holds {KEY_BYTES + 1} bytes, not {KEY_BYTES}"),
    ],
)
def test_a_missing_garbled_or_cut_key_is_refused(tmp_path, content, match):
    if content is not None:
        (tmp_path / KEY_FILE).write_text(content)
    with pytest.raises(RecordError, match=match):
        read_key(tmp_path)


def test_a_key_with_a_trailing_newline_reads(tmp_path):
    (tmp_path / KEY_FILE).write_text("cd" * KEY_BYTES + "\n")
    assert read_key(tmp_path) == b"\xcd" * KEY_BYTES


def test_the_signature_is_hmac_sha256_over_the_canonical_json_with_the_version():
    rec = Probe(name="é x", n=2, tags=["b", "a"])
    canonical = '{"n":2,"name":"\\u00e9 x","schema_version":3,"tags":["b","a"]}'
    want = hmac.new(KEY, canonical.encode(), hashlib.sha256).hexdigest()
    assert rec.digest(KEY) == want
    assert rec.sign(KEY) is rec and rec.hmac == want
    assert rec.digest(KEY) == want  # the hmac field itself is not signed
    assert rec.digest(b"\x01" * KEY_BYTES) != want


def test_fields_json_cannot_hold_as_they_are_are_signed_as_json():
    class Located(Probe):
        where: Path

    canonical = '{"n":0,"name":"x","schema_version":3,"tags":[],"where":"/data/m"}'
    want = hmac.new(KEY, canonical.encode(), hashlib.sha256).hexdigest()
    assert Located(name="x", where=Path("/data/m")).digest(KEY) == want


def test_the_version_is_signed():
    class Later(Probe):
        SCHEMA: ClassVar[int] = 4

    assert Later(name="x").digest(KEY) != Probe(name="x").digest(KEY)


def test_verify_refuses_unsigned_tampered_and_foreign_records(tmp_path):
    path = tmp_path / "r.json"
    rec = Probe(name="x").sign(KEY)
    assert rec.verify(KEY, path) is rec
    with pytest.raises(ForgedRecord, match=r"r\.json: Probe is unsigned \(written without the sweep's key\): ignored"):
        Probe(name="x").verify(KEY, path)
    rec.n = 1
    with pytest.raises(ForgedRecord, match=r"r\.json: Probe does not verify \(written without"):
        rec.verify(KEY, path)
    with pytest.raises(ForgedRecord, match="does not verify"):
        Probe(name="x").sign(b"\x02" * KEY_BYTES).verify(KEY, path)


def test_load_verified_reads_the_file_or_the_bytes_given_and_none_only_when_missing(tmp_path):
    path = tmp_path / "r.json"
    assert Probe.load_verified_or_none(path, KEY) is None
    Probe(name="x", n=5).sign(KEY).dump(path)
    assert Probe.load_verified_or_none(path, KEY).n == 5
    assert Probe.load_verified(path, KEY).n == 5
    raw = path.read_bytes()
    path.unlink()
    assert Probe.load_verified_or_none(path, KEY, raw).n == 5  # the bytes the caller read: the file is not read
    data = json.loads(raw)
    data["n"] = 6
    path.write_text(json.dumps(data))
    with pytest.raises(ForgedRecord, match=rf"^{path}: Probe does not verify"):
        Probe.load_verified_or_none(path, KEY)
    path.write_text("{")
    with pytest.raises(RecordError, match="cannot read Probe"):
        Probe.load_verified_or_none(path, KEY)


def test_a_failed_read_of_the_key_is_retried_and_counted(tmp_path, monkeypatch):
    create_key(tmp_path)
    want = bytes.fromhex((tmp_path / KEY_FILE).read_text())
    real = Path.read_text
    calls = []

    def eio_once(self, *a, **kw):
        calls.append(self)
        if len(calls) == 1:
            raise OSError(errno.EIO, "I/O error")
        return real(self, *a, **kw)

    monkeypatch.setattr(Path, "read_text", eio_once)
    before = RETRIES.counts["key"]
    assert read_key(tmp_path) == want and len(calls) == 2
    assert RETRIES.counts["key"] == before + 1
