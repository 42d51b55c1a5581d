"""What an agent may submit, and the frozen copy the grader evaluates.

A submission is a directory inside the run's output/ holding full weights in safetensors with a config.
Everything else gets a clear error that is recorded as an invalid submission: paths or symlinks that leave
output/, missing or empty directories, LoRA adapters, pickle-only checkpoints, code that needs
trust_remote_code, safetensors headers that do not fit their file, shard indexes naming files elsewhere, and
directories past the sweep's limits (file count, per-file and total size). The accepted files are copied into the sweep directory before grading, so the agent cannot
change the weights while (or after) they are scored.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from a2rl.grading.trust import UntrustedArtifact, check_model_files

# Files a model directory needs for loading; anything else (optimizer state, trainer checkpoints) stays behind.
KEEP_SUFFIXES = (".safetensors", ".json", ".txt", ".model", ".jinja", ".tiktoken")
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".ckpt")


MAX_PATH = 4096


class ArtifactError(Exception):
    pass


class MalformedPath(ValueError):
    """A model_path no file system could hold: a bad request, answered 400 and never enqueued."""


@dataclass(frozen=True)
class Limits:
    max_files: int
    max_file_bytes: int
    max_total_bytes: int

    @classmethod
    def for_base(cls, settings, base_model: Path) -> "Limits":
        """The sweep's caps; unset byte caps are 3x the base model's weights (at least 1 GiB)."""
        base = sum(p.stat().st_size for p in Path(base_model).glob("*.safetensors"))
        default = max(3 * base, 1 << 30)
        gb = lambda v: int(v * (1 << 30)) if v is not None else None  # noqa: E731
        total = gb(settings.max_total_gb) or default
        return cls(settings.max_files, gb(settings.max_file_gb) or total, total)


def check_model_path(model_path: object) -> None:
    if isinstance(model_path, str) and ("\0" in model_path or len(model_path) > MAX_PATH
                                        or any(len(part) > 255 for part in model_path.split("/"))):
        raise MalformedPath(f"model_path is not a usable path (NUL byte, or longer than {MAX_PATH} characters "
                            f"or 255 per name)")


def resolve_submission(model_path: str, workspace: Path) -> Path:
    """The real directory a submitted path names; it must lie inside <workspace>/output."""
    if not isinstance(model_path, str) or not model_path.strip():
        raise ArtifactError("model_path is required: the directory under $OUTPUT_DIR holding your model")
    check_model_path(model_path)
    output = (workspace / "output").resolve()
    given = Path(model_path)
    path = (given if given.is_absolute() else workspace / given).resolve()
    if path != output and output not in path.parents:
        raise ArtifactError(f"model_path {model_path!r} resolves to {path}, outside the run's output directory "
                            f"{output}: submit a directory under $OUTPUT_DIR (symlinks out of it are refused)")
    if not path.exists():
        raise ArtifactError(f"model_path {model_path!r} does not exist")
    if not path.is_dir():
        raise ArtifactError(f"model_path {model_path!r} is not a directory")
    return path


def check_artifact(path: Path, output: Path, limits: Limits) -> list[Path]:
    """The files to freeze, or ArtifactError saying what is wrong with the directory."""
    output = output.resolve()
    with os.scandir(path) as it:  # counted lazily: a directory of a million files costs max_files+1 entries
        entries = sorted(Path(e.path) for e in itertools.islice(it, limits.max_files + 1))
    if len(entries) > limits.max_files:
        raise ArtifactError(f"{path.name}/ holds more than {limits.max_files} entries: submit only the model "
                            f"files (weights, config, tokenizer)")
    if not entries:
        raise ArtifactError(f"{path.name}/ is empty: save the model with model.save_pretrained(dir) and the "
                            f"tokenizer with tokenizer.save_pretrained(dir)")
    names = {p.name for p in entries}
    for p in entries:
        real = p.resolve()
        if real != output and output not in real.parents:
            raise ArtifactError(f"{p.name} is a symlink to {real}, outside the output directory: refused")
    if "adapter_config.json" in names or any(n.startswith("adapter_model") for n in names):
        raise ArtifactError("this is a LoRA/PEFT adapter, not a full model: merge it first "
                            "(model = model.merge_and_unload(); model.save_pretrained(dir)) and submit that")
    weights = [p for p in entries if p.suffix == ".safetensors" and p.is_file()]
    if not weights:
        if any(p.suffix in PICKLE_SUFFIXES for p in entries):
            raise ArtifactError("only pickle checkpoints (.bin/.pt) found; they are never loaded: save with "
                                "model.save_pretrained(dir, safe_serialization=True) to write .safetensors")
        raise ArtifactError(f"no *.safetensors weights in {path.name}/ (found: {', '.join(sorted(names))})")
    sizes = {p: p.stat().st_size for p in entries if p.is_file()}  # apparent sizes: sparse files count in full
    if (big := max(sizes, key=sizes.get, default=None)) is not None and sizes[big] > limits.max_file_bytes:
        raise ArtifactError(f"{big.name} is {sizes[big] / 2**30:.2f} GiB, over the limit of "
                            f"{limits.max_file_bytes / 2**30:.2f} GiB per file")
    if sum(sizes.values()) > limits.max_total_bytes:
        raise ArtifactError(f"{path.name}/ holds {sum(sizes.values()) / 2**30:.2f} GiB, over the limit of "
                            f"{limits.max_total_bytes / 2**30:.2f} GiB")
    if "config.json" not in names:
        raise ArtifactError("config.json is missing: save with model.save_pretrained(dir)")
    try:
        config = json.loads((path / "config.json").read_text())
    except ValueError as e:
        raise ArtifactError(f"config.json is not valid JSON: {e}") from None
    if not isinstance(config, dict):
        raise ArtifactError("config.json must hold a JSON object")
    if "auto_map" in config:
        raise ArtifactError("config.json has auto_map (custom model code): models are loaded without "
                            "trust_remote_code; use a standard transformers architecture")
    kept = [p for p in entries if p.is_file() and p.suffix in KEEP_SUFFIXES]
    try:
        check_model_files(path, kept)
    except UntrustedArtifact as e:
        raise ArtifactError(str(e)) from None
    return kept


def freeze(files: list[Path], dest: Path) -> Path:
    """Copy the accepted files into `dest` (in the sweep directory), which then belongs to the grader."""
    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for f in files:
        shutil.copyfile(f, tmp / f.name)
    tmp.rename(dest)
    return dest
