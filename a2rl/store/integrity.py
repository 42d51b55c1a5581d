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
from pathlib import Path
from typing import TypeVar

from a2rl.records import Record, RecordError, missing

KEY_FILE = ".a2rl-key"
S = TypeVar("S", bound="SignedRecord")


class ForgedRecord(RecordError):
    """A record whose HMAC is missing or does not match its content: written without the key."""


def create_key(directory: Path) -> None:
    """Write the directory's key once (O_EXCL: an existing key is never replaced), readable only by its owner."""
    Path(directory).mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(Path(directory) / KEY_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))


def read_key(directory: Path) -> bytes:
    path = Path(directory) / KEY_FILE
    try:
        return bytes.fromhex(path.read_text().strip())
    except (OSError, ValueError) as e:
        raise RecordError(f"cannot read the signing key {path} ({e}): records there cannot be verified") from None


class SignedRecord(Record):
    """A record carrying `hmac`: HMAC-SHA256 over its canonical JSON (sorted keys, schema version stamped)
    without the hmac field itself."""

    hmac: str | None = None

    def digest(self, key: bytes) -> str:
        data = self.model_dump(mode="json", exclude={"hmac"})
        data["schema_version"] = self.SCHEMA
        return _hmac.new(
            key, json.dumps(data, sort_keys=True, separators=(",", ":")).encode(), hashlib.sha256
        ).hexdigest()

    def sign(self: S, key: bytes) -> S:
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
