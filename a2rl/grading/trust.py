"""What the grader checks on a frozen submission before loading it: nothing it reads from the shared file system
is trusted. The run's job applies the same file checks when the agent submits, so the agent hears of a problem
at once; the grader repeats them on the copy it is about to load.
"""

from __future__ import annotations

import json
import os
from contextlib import ExitStack
from pathlib import Path
from typing import BinaryIO

from a2rl.weights import MAX_HEADER_BYTES


class UntrustedArtifact(ValueError):
    pass


def check_safetensors(name: str, f: BinaryIO, size: int) -> None:
    """The header must be JSON whose tensors end exactly where the file does (a lying header could make a
    loader read past the file or allocate what the file does not hold). Read from the open file `f`, whose
    first `size` bytes are what is loaded."""
    f.seek(0)
    n = int.from_bytes(f.read(8), "little")
    if size < 8 or n > min(MAX_HEADER_BYTES, size - 8):
        raise UntrustedArtifact(f"{name}: safetensors header claims {n} bytes in a file of {size} bytes")
    try:
        header = json.loads(f.read(n))
        ends = [int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"]
    except (ValueError, TypeError, KeyError, IndexError, AttributeError) as e:
        raise UntrustedArtifact(f"{name}: unreadable safetensors header ({type(e).__name__})") from None
    if 8 + n + max(ends, default=0) != size:
        raise UntrustedArtifact(
            f"{name}: safetensors header describes {8 + n + max(ends, default=0)} bytes, the file has {size}"
        )


def check_files(files: dict[str, BinaryIO], sizes: dict[str, int]) -> None:
    """Safetensors headers that fit their files, and shard indexes that name files among `files` (name: the
    file, open for reading; checked on that descriptor, the one the caller copies or loads from, and never read
    past its size in `sizes`)."""
    for name, f in files.items():
        if name.endswith(".safetensors"):
            check_safetensors(name, f, sizes[name])
    for name, f in files.items():
        if not name.endswith(".index.json"):
            continue
        try:
            f.seek(0)
            shards = set(json.loads(f.read(sizes[name]))["weight_map"].values())
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise UntrustedArtifact(f"{name}: unreadable shard index ({type(e).__name__})") from None
        for shard in shards:
            if not isinstance(shard, str) or shard not in files:
                raise UntrustedArtifact(f"{name} names {shard!r}, not a weights file of the submitted directory")


def check_model_files(model_dir: Path) -> None:
    """Every entry of `model_dir` a regular file (no symlinks or directories), checked by check_files."""
    paths = sorted(Path(model_dir).iterdir())
    if bad := [p.name for p in paths if p.is_symlink() or not p.is_file()]:
        raise UntrustedArtifact(f"{bad[0]}: only regular files are loaded (no symlinks or directories)")
    with ExitStack() as stack:
        files = {p.name: stack.enter_context(open(p, "rb")) for p in paths}
        check_files(files, {name: os.fstat(f.fileno()).st_size for name, f in files.items()})


def frozen_dir(artifact: str, submissions: Path) -> Path:
    """The directory a queue entry names, if it is one directly under the sweep's submissions/ (the only
    place the grader reads weights from, or deletes); UntrustedArtifact otherwise."""
    path = Path(artifact)
    if path.is_symlink() or path.resolve().parent != Path(submissions).resolve():
        raise UntrustedArtifact(f"artifact {artifact} is not a frozen copy under {submissions}")
    if not path.is_dir():
        raise UntrustedArtifact(f"artifact {artifact} is missing")
    return path


def check_frozen(artifact: str, submissions: Path) -> Path:
    """The frozen copy a queue entry names, if it lies under submissions/ and its files may be loaded."""
    path = frozen_dir(artifact, submissions)
    check_model_files(path)
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        config = None
    if not isinstance(config, dict) or "auto_map" in config:
        raise UntrustedArtifact("config.json is missing, malformed or names custom model code (auto_map)")
    return path
