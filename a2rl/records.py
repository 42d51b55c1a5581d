"""Versioned on-disk records and the atomic file operations every writer uses.

Every file a2rl writes is a pydantic model with a `schema_version` ("MAJOR.MINOR" from record format 1.0 on; an
int before). Readers read every older version through its upgrade steps (upgrades.py, the one place that says how),
refuse newer ones and never guess. Writes go to
a temp file in the same directory and are renamed into place, so a reader (or a writer killed mid-way) never
sees half a file.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict

from a2rl.upgrades import UpgradeError, upgrade

R = TypeVar("R", bound="Record")
T = TypeVar("T")
log = logging.getLogger("a2rl.records")


class RecordError(Exception):
    """A record file is missing, unreadable, or of an unknown version."""


class Record(BaseModel):
    model_config = ConfigDict(extra="forbid")
    SCHEMA: ClassVar[str] = "1.0"  # this a2rl's version of the record: a change adds its step to upgrades.py
    schema_version: int | str = 0  # stamped by dump(); an int only in records of the 0.x releases

    def dump(self, path: Path) -> None:
        atomic_write_text(path, self.json_text())

    def _stamped(self) -> dict:
        return {**self.model_dump(mode="json"), "schema_version": self.SCHEMA}

    def json_text(self) -> str:
        """The record as its file holds it, stamped with this a2rl's version."""
        return json.dumps(self._stamped(), indent=1, sort_keys=True) + "\n"

    def json_line(self) -> str:
        """The record as one line of a .jsonl file."""
        return json.dumps(self._stamped()) + "\n"

    @classmethod
    def load(cls: type[R], path: Path, raw: bytes | OSError | None = None) -> R:
        """`raw`: the file's bytes, or the error reading them, when the caller read it already (read_many)."""
        try:
            if raw is None:
                raw = read_bytes(path)
            elif isinstance(raw, OSError):
                raise raw
        except OSError as e:
            raise RecordError(f"cannot read {cls.__name__} from {path}: {e}") from e
        try:  # parse and validate in one pass, without Python dicts in between: a big sweep's tables read 10^4s
            rec = cls.model_validate_json(raw)
        except ValueError:
            rec = None
        if rec is not None and rec.schema_version == cls.SCHEMA:
            return rec
        return cls._load_slowly(path, raw)  # what is wrong with it, in its own words

    @classmethod
    def _load_slowly(cls: type[R], path: Path, raw: bytes) -> R:
        try:
            data = json.loads(raw.decode())
        except ValueError as e:
            raise RecordError(f"cannot read {cls.__name__} from {path}: {e}") from e
        if not isinstance(data, dict):
            raise RecordError(f"{path}: not a {cls.__name__} (a JSON {type(data).__name__}, not an object)")
        original = data
        if data.get("schema_version") != cls.SCHEMA:
            try:
                data = upgrade(cls.__name__, data, cls.SCHEMA)
            except UpgradeError as e:
                raise RecordError(f"{path}: {e}") from None
        try:
            rec = cls.model_validate(data)
        except ValueError as e:  # a record of the right version with the wrong shape is as unreadable
            raise RecordError(f"{path}: not a valid {cls.__name__}: {str(e).splitlines()[0]}") from None
        rec._read_from(original)
        return rec

    def _read_from(self, original: dict) -> None:
        """Called with the fields as the file held them, before any upgrade (SignedRecord verifies those)."""

    @classmethod
    def load_or_none(cls: type[R], path: Path, raw: bytes | OSError | None = None) -> R | None:
        try:
            return cls.load(path, raw)
        except RecordError as e:
            if missing(e):
                return None
            raise

    def publish_once(self, path: Path) -> bool:
        """Create `path` atomically only if it does not exist yet; False when it already did.

        A hard link fails with EEXIST where another writer got there first, on local disks and NFS alike, so
        two graders recording the same submission leave exactly one entry.
        """
        tmp = _write_temp(path, self.json_text())
        try:
            os.link(tmp, path)
            return True
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)


def read_bytes(path: Path) -> bytes:
    """A file's bytes in the fewest system calls (open, read, close; no stat, fstat, isatty or seek as open()
    makes): a big sweep's tables read 10^4s of small files."""
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


SLOW_READ_S = 100e-6  # a small file read slower than this on average comes over a network file system


def read_many(paths: list[Path], threads: int = 16, probe: int = 64) -> list[bytes | OSError]:
    """Each file's bytes, or the error reading it, in order. The first `probe` files are read one by one; when
    they came slowly (a shared file system's latency, not the reading, dominates), the rest are read by `threads`
    threads side by side. From the page cache one thread is faster: 16 took 3x as long for 10^4 small files.
    Only the reading is threaded: threads parsing at once contend for the GIL."""

    def read(chunk: list[Path]) -> list[bytes | OSError]:
        out: list[bytes | OSError] = []
        for path in chunk:
            try:
                out.append(read_bytes(path))
            except OSError as e:
                out.append(e)
        return out

    t = time.perf_counter()
    first = read(paths[:probe])
    rest = paths[probe:]
    if not rest or time.perf_counter() - t <= SLOW_READ_S * len(first):
        return first + read(rest)
    # a chunk per thread: a future per file costs more than it reads
    chunks = [rest[i::threads] for i in range(threads)]
    with ThreadPoolExecutor(threads) as pool:
        done = list(pool.map(read, chunks))
    out: list[bytes | OSError] = [b""] * len(rest)
    for i, chunk in enumerate(done):
        out[i::threads] = chunk
    return first + out


def missing(e: RecordError) -> bool:
    """The record could not be loaded because its file is not there (what `load_or_none` makes None)."""
    return isinstance(e.__cause__, (FileNotFoundError, NotADirectoryError))


def _write_temp(path: Path, text: str) -> str:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp


def atomic_write_text(path: Path, text: str) -> None:
    os.replace(_write_temp(path, text), path)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def now() -> float:
    return time.time()


class StorageFull(OSError):
    """The sweep directory's file system stayed full (or over quota) longer than a writer waits for room."""


def disk_full(e: BaseException) -> bool:
    """Whether `e` (or what it was raised from) says the file system has no space or quota left: the
    infrastructure's trouble, waited out and retried, never a submission's fault."""
    seen: BaseException | None = e
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        seen = seen.__cause__
    return False


FULL_RETRY_S = 5.0  # a full shared file system is freed by someone else: check for room this often


def while_full(
    write: Callable[[], T],
    what: str,
    give_up_s: float = 3600.0,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """`write()`, again every FULL_RETRY_S while it fails for lack of space (each write is atomic or redone
    from the start, so a retry never finds half of an earlier try); a warning line when it starts waiting and
    one a minute after that. StorageFull after `give_up_s`."""
    started = warned = None
    while True:
        try:
            result = write()
        except OSError as e:
            if not disk_full(e):
                raise
            t = clock()
            started = t if started is None else started
            if t - started >= give_up_s:
                raise StorageFull(
                    e.errno, f"{what}: the file system stayed full for {give_up_s:g} s ({e.strerror})"
                ) from None
            if warned is None or t - warned >= 60:
                log.warning(
                    "%s: no space left on the file system (%s); retrying every %g s", what, e.strerror, FULL_RETRY_S
                )
                warned = t
            sleep(FULL_RETRY_S)
            continue
        if started is not None:
            log.info("%s: written after waiting %.0f s for space", what, clock() - started)
        return result
