"""What an agent may submit, and the frozen copy the grader evaluates.

A submission is a directory inside the run's output/ holding full weights in safetensors with a config.
Everything else gets a clear error that is recorded as an invalid submission: paths or symlinks that leave
output/, missing or empty directories, LoRA adapters, pickle-only checkpoints, code that needs
trust_remote_code, safetensors headers that do not fit their file, shard indexes naming files elsewhere, and
directories past the sweep's limits (file count, per-file and total size). The accepted files are copied into the
sweep directory before grading, so the agent cannot change the weights while (or after) they are scored. Every
file is opened once, walking from output/'s directory descriptor without following a link, and checked and
copied on that descriptor (recording/nofollow.py): a symlink the agent swaps in during a submission is refused,
never followed, so no file from outside its sandbox can be frozen as its own.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from a2rl.grading.frozenscan import save_scan
from a2rl.grading.trust import UntrustedArtifact, check_files
from a2rl.recording import nofollow
from a2rl.recording.frozencopies import partial_path, remove_entry
from a2rl.run.onecopy import copy_scanned
from a2rl.units import GIB

# Files a model directory needs for loading; anything else (optimizer state, trainer checkpoints) stays behind.
KEEP_SUFFIXES = (".safetensors", ".json", ".txt", ".model", ".jinja", ".tiktoken")
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".ckpt")

log = logging.getLogger("a2rl.submit")


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
        default = max(3 * base, GIB)
        gb = lambda v: int(v * GIB) if v is not None else None  # noqa: E731
        total = gb(settings.max_total_gb) or default
        return cls(settings.max_files, gb(settings.max_file_gb) or total, total)


def check_model_path(model_path: object) -> None:
    if isinstance(model_path, str) and (
        "\0" in model_path or len(model_path) > MAX_PATH or any(len(part) > 255 for part in model_path.split("/"))
    ):
        raise MalformedPath(
            f"model_path is not a usable path (NUL byte, or longer than {MAX_PATH} characters or 255 per name)"
        )


def resolve_submission(model_path: str, workspace: Path) -> Path:
    """The real directory a submitted path names; it must lie inside <workspace>/output. Only where to look:
    check_artifact opens it without following any link, so a path changed since is refused, never followed."""
    if not isinstance(model_path, str) or not model_path.strip():
        raise ArtifactError("model_path is required: the directory under $OUTPUT_DIR holding your model")
    check_model_path(model_path)
    output = workspace.resolve() / "output"  # not resolved: an output/ the agent made a symlink holds nothing
    given = Path(model_path)
    try:
        path = (given if given.is_absolute() else workspace / given).resolve()
    except (OSError, RuntimeError) as e:  # a symlink loop
        raise ArtifactError(f"model_path {model_path!r} does not resolve: {e}") from None
    if path != output and output not in path.parents:
        raise ArtifactError(
            f"model_path {model_path!r} resolves to {path}, outside the run's output directory "
            f"{output}: submit a directory under $OUTPUT_DIR (symlinks out of it are refused)"
        )
    if not path.exists():
        raise ArtifactError(f"model_path {model_path!r} does not exist")
    if not path.is_dir():
        raise ArtifactError(f"model_path {model_path!r} is not a directory")
    return path


class Artifact:
    """A submitted directory's files, each opened once without following a link: what check_artifact checked
    (type, size, content) is read from the same descriptors by freeze(), never past the sizes checked. Close
    it (or use `with`)."""

    def __init__(self, name: str):
        self.name = name
        self.files: dict[str, BinaryIO] = {}  # every regular file (or link inside output/ to one), by name
        self.sizes: dict[str, int] = {}  # as checked: apparent sizes (a sparse file counts in full)
        self.kept: list[str] = []  # what freeze() copies

    def close(self) -> None:
        for f in self.files.values():
            f.close()

    def __enter__(self) -> "Artifact":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _changed(name: str) -> ArtifactError:
    return ArtifactError(f"{nofollow.shown(name)} changed while it was submitted (a symlink swapped in): refused")


def _open_entry(name: str, dir_fd: int, path: Path, out_fd: int, output: Path) -> tuple[int, int] | None:
    """The regular file `name` in the submitted directory, open, and its size. A symlink is followed only as
    far as a path check says it stays inside output/, and its target then opened from output/'s descriptor
    without following any link: one swapped in meanwhile is refused. None for what is not a regular file
    (a directory, a FIFO: never opened) or is gone."""
    try:
        try:
            fd, st = nofollow.open_regular(name, dir_fd)
            return fd, st.st_size
        except nofollow.Changed as e:
            if e.strerror != "symlink":
                return None
        real = (path / name).resolve()
        if output not in real.parents:
            raise ArtifactError(f"{nofollow.shown(name)} is a symlink to {real}, outside the output directory: refused")
        try:  # resolve() saw no link on the way to `real`: a link there now was swapped in since
            d = nofollow.open_dir(real.parent.relative_to(output).parts, out_fd)
        except nofollow.Changed:
            raise _changed(name) from None
        try:
            fd, st = nofollow.open_regular(real.name, d)
            return fd, st.st_size
        except nofollow.Changed as e:
            if e.strerror == "symlink":
                raise _changed(name) from None
            return None
        finally:
            os.close(d)
    except (FileNotFoundError, RuntimeError):  # removed meanwhile, a dangling link, a link loop
        return None


def check_artifact(path: Path, output: Path, limits: Limits) -> Artifact:
    """The directory's files, opened, within the limits and checked, ready to freeze; or ArtifactError saying
    what is wrong with the directory. Nothing is read through a link the agent could change meanwhile."""
    try:
        output = output.parent.resolve() / output.name
        path = path.resolve()
    except (OSError, RuntimeError):  # a link swapped out while resolve() walked it, or a link loop
        raise _changed(f"{path.name}/") from None
    if path != output and output not in path.parents:
        raise ArtifactError(f"{path} is outside the run's output directory {output}: refused")
    artifact = Artifact(path.name)
    try:
        out_fd = nofollow.open_last(output)
        try:
            with nofollow.opened_dir(path.relative_to(output).parts, out_fd) as dir_fd:
                _check(artifact, path, dir_fd, out_fd, output, limits)
        finally:
            os.close(out_fd)
    except nofollow.Changed:
        artifact.close()
        raise _changed(f"{path.name}/") from None
    except OSError as e:
        artifact.close()
        raise ArtifactError(f"{path.name}/ could not be read: {e.strerror}") from None
    except BaseException:
        artifact.close()
        raise
    return artifact


def _check(artifact: Artifact, path: Path, dir_fd: int, out_fd: int, output: Path, limits: Limits) -> None:
    with os.scandir(dir_fd) as it:  # counted lazily: a directory of a million files costs max_files+1 entries
        names = sorted(e.name for e in itertools.islice(it, limits.max_files + 1))
    if len(names) > limits.max_files:
        raise ArtifactError(
            f"{path.name}/ holds more than {limits.max_files} entries: submit only the model "
            f"files (weights, config, tokenizer)"
        )
    if not names:
        raise ArtifactError(
            f"{path.name}/ is empty: save the model with model.save_pretrained(dir) and the "
            f"tokenizer with tokenizer.save_pretrained(dir)"
        )
    for name in names:
        if (opened := _open_entry(name, dir_fd, path, out_fd, output)) is not None:
            artifact.files[name], artifact.sizes[name] = os.fdopen(opened[0], "rb"), opened[1]
    if "adapter_config.json" in names or any(n.startswith("adapter_model") for n in names):
        raise ArtifactError(
            "this is a LoRA/PEFT adapter, not a full model: merge it first "
            "(model = model.merge_and_unload(); model.save_pretrained(dir)) and submit that"
        )
    if not any(n.endswith(".safetensors") for n in artifact.files):
        if any(Path(n).suffix in PICKLE_SUFFIXES for n in names):
            raise ArtifactError(
                "only pickle checkpoints (.bin/.pt) found; they are never loaded: save with "
                "model.save_pretrained(dir, safe_serialization=True) to write .safetensors"
            )
        raise ArtifactError(
            f"no *.safetensors weights in {path.name}/ (found: {', '.join(map(nofollow.shown, names))})"
        )
    sizes = artifact.sizes
    if (big := max(sizes, key=sizes.get, default=None)) is not None and sizes[big] > limits.max_file_bytes:
        raise ArtifactError(
            f"{nofollow.shown(big)} is {sizes[big] / GIB:.2f} GiB, over the limit of "
            f"{limits.max_file_bytes / GIB:.2f} GiB per file"
        )
    if sum(sizes.values()) > limits.max_total_bytes:
        raise ArtifactError(
            f"{path.name}/ holds {sum(sizes.values()) / GIB:.2f} GiB, over the limit of "
            f"{limits.max_total_bytes / GIB:.2f} GiB"
        )
    if "config.json" not in artifact.files:
        raise ArtifactError("config.json is missing: save with model.save_pretrained(dir)")
    artifact.kept = [n for n in sorted(artifact.files) if Path(n).suffix in KEEP_SUFFIXES]
    check_content({n: artifact.files[n] for n in artifact.kept}, sizes)


def check_content(files: dict[str, BinaryIO], sizes: dict[str, int]) -> None:
    """config.json (a JSON object, no custom code) and the weights' headers and shard indexes, read from
    the open files, never past their `sizes`."""
    try:
        files["config.json"].seek(0)
        config = json.loads(files["config.json"].read(sizes["config.json"]))
    except ValueError as e:
        raise ArtifactError(f"config.json is not valid JSON: {e}") from None
    if not isinstance(config, dict):
        raise ArtifactError("config.json must hold a JSON object")
    if "auto_map" in config:
        raise ArtifactError(
            "config.json has auto_map (custom model code): models are loaded without "
            "trust_remote_code; use a standard transformers architecture"
        )
    try:
        check_files(files, sizes)
    except UntrustedArtifact as e:
        raise ArtifactError(str(e)) from None


def freeze(artifact: Artifact, dest: Path, key: bytes | None = None, canary: str | None = None) -> Path:
    """Copy the checked files into `dest` (in the sweep directory), which then belongs to the grader: from the
    descriptors that were checked, exactly the sizes that were checked; the copy's content is checked again,
    as the agent could still write into the files it submitted. With the sweep's `key`, the copy's own reads also
    give the content hash, the lineage samples and the search for `canary` (run/onecopy.py), signed beside the
    copy for the grader (grading/frozenscan.py)."""
    tmp = partial_path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    remove_entry(tmp, dest.parent)  # a stale one, from a freeze that was interrupted
    tmp.mkdir()
    copies: dict[str, BinaryIO] = {}
    try:
        for name in artifact.kept:
            copies[name] = open(tmp / name, "w+b")
        try:
            done = None if key is None else copy_scanned(artifact.files, artifact.sizes, artifact.kept, copies, canary)
            for name in artifact.kept if done is None else []:
                nofollow.copy_exact(artifact.files[name].fileno(), copies[name].fileno(), artifact.sizes[name])
        except nofollow.Changed as e:
            raise ArtifactError(f"{nofollow.shown(e.filename or name)} {e.strerror}: refused") from None
        check_content(copies, artifact.sizes)
    except BaseException:
        with contextlib.suppress(OSError):  # the refusal is what the caller hears, never the clean-up's error
            remove_entry(tmp, dest.parent)
        raise
    finally:
        for f in copies.values():
            f.close()
    tmp.rename(dest)
    if done is not None:
        try:
            save_scan(dest, done.scanned, done.canary_in, canary, key)
        except OSError as e:  # the grader reads the copy itself then
            log.warning("the freeze's scan of %s could not be kept: %s", dest.name, e)
    return dest
