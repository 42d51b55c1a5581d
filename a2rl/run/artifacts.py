"""What an agent may submit, and the frozen copy the grader evaluates.

A submission is a directory inside the run's output/ holding full weights in safetensors with a config.
Everything else gets a clear error that is recorded as an invalid submission: paths or symlinks that leave
output/, missing or empty directories, LoRA adapters, pickle-only checkpoints, code that needs
trust_remote_code. The accepted files are copied into the sweep directory before grading, so the agent cannot
change the weights while (or after) they are scored.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

# Files a model directory needs for loading; anything else (optimizer state, trainer checkpoints) stays behind.
KEEP_SUFFIXES = (".safetensors", ".json", ".txt", ".model", ".jinja", ".tiktoken")
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".ckpt")


class ArtifactError(Exception):
    pass


def resolve_submission(model_path: str, workspace: Path) -> Path:
    """The real directory a submitted path names; it must lie inside <workspace>/output."""
    if not isinstance(model_path, str) or not model_path.strip():
        raise ArtifactError("model_path is required: the directory under $OUTPUT_DIR holding your model")
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


def check_artifact(path: Path, output: Path) -> list[Path]:
    """The files to freeze, or ArtifactError saying what is wrong with the directory."""
    output = output.resolve()
    entries = sorted(path.iterdir())
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
    return [p for p in entries if p.is_file() and p.suffix in KEEP_SUFFIXES]


def freeze(files: list[Path], dest: Path) -> Path:
    """Copy the accepted files into `dest` (in the sweep directory), which then belongs to the grader."""
    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for f in files:
        shutil.copyfile(f, tmp / f.name)
    tmp.rename(dest)
    return dest
