"""HMAC signing of the records that decide scores: ledger entries, queue entries, results and baselines.

The key is a random file, `.a2rl-key` (mode 0600), in the directory whose records it signs: the sweep directory
(created with the sweep) and a shared baseline cache (created on first use). Both lie outside every workspace,
the launcher, the runs' jobs and the graders read them, and the sandbox hides them from the agent. The sweep
directory rather than ~/.config: it is the one place every job of the sweep is sure to see, on any node.
Under `isolation: none` an agent running as the same user can read the key, so such sweeps are untrusted; the
HMAC still catches anything that writes the sweep directory without it.
"""

from __future__ import annotations

import hashlib
import hmac as _hmac
import json
import os
import secrets
import tempfile
from pathlib import Path
from typing import TypeVar

from pydantic import PrivateAttr

from a2rl.records import Record, RecordError, missing
from a2rl.store.retries import retried

KEY_FILE = ".a2rl-key"
KEY_BYTES = 32
S = TypeVar("S", bound="SignedRecord")


class ForgedRecord(RecordError):
    """A record whose HMAC is missing or does not match its content: written without the key."""


def create_key(directory: Path) -> None:
    """Write the directory's key once, readable only by its owner. It becomes visible whole or not at all: written
    and fsynced under a temporary name, then hard-linked to its name, which fails if another creator (on any node)
    linked first: that key stands, never replaced."""
    Path(directory).mkdir(parents=True, exist_ok=True)
    path = Path(directory) / KEY_FILE
    if path.exists():
        return
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f"{KEY_FILE}.", suffix=".tmp")  # mode 0600
    try:
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(KEY_BYTES))
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            return
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    finally:
        os.unlink(tmp)


def read_key(directory: Path) -> bytes:
    """The directory's key; a key file that is empty or short (read while an older a2rl was writing it, or cut
    off) is refused, never used to sign."""
    path = Path(directory) / KEY_FILE
    try:
        key = bytes.fromhex(retried(path.read_text, "key").strip())
    except (OSError, ValueError) as e:
        raise RecordError(f"cannot read the signing key {path} ({e}): records there cannot be verified") from None
    if len(key) != KEY_BYTES:
        raise RecordError(
            f"the signing key {path} holds {len(key)} bytes, not {KEY_BYTES}: it was read half-written or was cut off;"
            " if no job of the sweep has signed with it yet, remove it and launch again, else restore it"
        )
    return key


class SignedRecord(Record):
    """A record carrying `hmac`: HMAC-SHA256 over its canonical JSON (sorted keys, schema version stamped)
    without the hmac field itself."""

    hmac: str | None = None
    # an upgraded record's fields as its file held them (records.py): what its writer signed
    _signed: dict | None = PrivateAttr(default=None)

    def _read_from(self, original: dict) -> None:
        self._signed = {k: v for k, v in original.items() if k != "hmac"}

    def digest(self, key: bytes) -> str:
        data = self._signed
        if data is None:
            data = self.model_dump(mode="json", exclude={"hmac"})
            data["schema_version"] = self.SCHEMA
        return _hmac.new(
            key, json.dumps(data, sort_keys=True, separators=(",", ":")).encode(), hashlib.sha256
        ).hexdigest()

    def sign(self: S, key: bytes) -> S:
        self._signed = None  # signs what this a2rl writes
        self.hmac = self.digest(key)
        return self

    def verify(self: S, key: bytes, path: Path) -> S:
        if self.hmac is None or not _hmac.compare_digest(self.hmac, self.digest(key)):
            raise ForgedRecord(
                f"{path}: {type(self).__name__} {'is unsigned' if self.hmac is None else 'does not verify'}"
                f" (written without the sweep's key): ignored"
            )
        return self

    @classmethod
    def load_verified(cls: type[S], path: Path, key: bytes, raw: bytes | OSError | None = None) -> S:
        """Load and check; RecordError (ForgedRecord for a bad signature) when it cannot be trusted. `raw`: as
        Record.load's."""
        return cls.load(path, raw).verify(key, path)

    @classmethod
    def load_verified_or_none(cls: type[S], path: Path, key: bytes, raw: bytes | OSError | None = None) -> S | None:
        try:
            return cls.load_verified(path, key, raw)
        except RecordError as e:
            if missing(e):
                return None
            raise
