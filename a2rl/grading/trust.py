"""What the grader checks on a frozen submission before loading it: nothing it reads from the shared file system
is trusted. The run's job applies the same file checks when the agent submits, so the agent hears of a problem
at once; the grader repeats them on the copy it is about to load.
"""

from __future__ import annotations

import json
from pathlib import Path

from a2rl.weights import MAX_HEADER_BYTES


class UntrustedArtifact(ValueError):
    pass


def inside(path: Path, root: Path) -> bool:
    """Whether `path` (resolved) lies strictly under `root` (resolved)."""
    return Path(root).resolve() in Path(path).resolve().parents


def check_safetensors(path: Path) -> None:
    """The header must be JSON whose tensors end exactly where the file does (a lying header could make a
    loader read past the file or allocate what the file does not hold)."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        if size < 8 or n > min(MAX_HEADER_BYTES, size - 8):
            raise UntrustedArtifact(f"{path.name}: safetensors header claims {n} bytes in a file of {size} bytes")
        try:
            header = json.loads(f.read(n))
            ends = [int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"]
        except (ValueError, TypeError, KeyError, IndexError, AttributeError) as e:
            raise UntrustedArtifact(f"{path.name}: unreadable safetensors header ({type(e).__name__})") from None
    if 8 + n + max(ends, default=0) != size:
        raise UntrustedArtifact(f"{path.name}: safetensors header describes {8 + n + max(ends, default=0)} bytes, "
                                f"the file has {size}")


def check_model_files(model_dir: Path, files: list[Path] | None = None) -> None:
    """No symlinks, safetensors headers that fit their files, and shard indexes that name files among `files`
    (default: everything in the directory, which must all be regular files)."""
    model_dir = Path(model_dir)
    if files is None:
        files = list(model_dir.iterdir())
        if bad := [p.name for p in files if p.is_symlink() or not p.is_file()]:
            raise UntrustedArtifact(f"{bad[0]}: only regular files are loaded (no symlinks or directories)")
    names = {p.name for p in files}
    for p in files:
        if p.suffix == ".safetensors":
            check_safetensors(p)
    for index in (p for p in files if p.name.endswith(".index.json")):
        try:
            shards = set(json.loads(index.read_text())["weight_map"].values())
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise UntrustedArtifact(f"{index.name}: unreadable shard index ({type(e).__name__})") from None
        for shard in shards:
            if not isinstance(shard, str) or shard not in names or not inside(model_dir / shard, model_dir):
                raise UntrustedArtifact(f"{index.name} names {shard!r}, not a weights file of the submitted "
                                        f"directory")


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
