"""Registries of tasks, agent stacks and cluster profiles, discovered from YAML files (as lm-eval does).

Adding one is adding a file: a task is `tasks/<name>/task.yaml`, an agent stack `configs/agents/<name>.yaml`,
a cluster profile `configs/clusters/<name>.yaml`. Extra search directories come from `A2RL_TASKS_PATH`,
`A2RL_AGENTS_PATH`, `A2RL_CLUSTERS_PATH` (os.pathsep-separated) and from a sweep's own `*_paths` settings.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Generic, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from a2rl.errors import SpecError, format_validation_error, unknown_name

PACKAGE = Path(__file__).resolve().parents[1]  # the a2rl package


def _home() -> Path:
    """Where tasks/, configs/ and slurm/ are: a source checkout's root (beside the package), else the copies an
    installed wheel ships as package data (a2rl/share/, setup.py); A2RL_HOME points elsewhere for other layouts."""
    if os.environ.get("A2RL_HOME"):
        return Path(os.environ["A2RL_HOME"])
    checkout = PACKAGE.parent
    return checkout if (checkout / "pyproject.toml").is_file() and (checkout / "tasks").is_dir() else PACKAGE / "share"


HOME = _home()

T = TypeVar("T", bound=BaseModel)


def load_yaml(path: Path) -> object:
    try:
        return yaml.safe_load(Path(path).read_text())
    except FileNotFoundError:
        raise SpecError([f"{path} does not exist"]) from None
    except IsADirectoryError:
        raise SpecError([f"{path} is a directory, not a YAML file"]) from None
    except yaml.YAMLError as e:
        raise SpecError([yaml_error(path, e)]) from None


def yaml_error(path: Path, e: yaml.YAMLError) -> str:
    """'sweep.yaml, line 3, column 9: YAML syntax error: mapping values are not allowed here' (PyYAML's own text
    names "<unicode string>" for text read first, and spans lines)."""
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    where = f"{path}, line {mark.line + 1}, column {mark.column + 1}" if mark else str(path)
    what = ": ".join(x for x in (getattr(e, "context", None), getattr(e, "problem", None)) if x) or str(e)
    return f"{where}: YAML syntax error: {' '.join(what.split())}"


def parse_yaml_file(model: type[T], path: Path) -> T:
    data = load_yaml(path)
    if not isinstance(data, dict):
        raise SpecError([f"{path}: expected a mapping at the top level, got {type(data).__name__}"])
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise SpecError([f"{path}: {line}" for line in format_validation_error(e, model)]) from None


class Registry(Generic[T]):
    """Name → spec, from `<dir>/<name>.yaml` files or `<dir>/<name>/<filename>` folders."""

    def __init__(self, model: type[T], kind: str, default_dir: Path, env_var: str, filename: str | None = None):
        self.model, self.kind, self.filename = model, kind, filename
        extra = [Path(p) for p in os.environ.get(env_var, "").split(os.pathsep) if p]
        self.dirs: list[Path] = [*extra, default_dir]

    def with_dirs(self, dirs: list[Path]) -> "Registry[T]":
        clone = object.__new__(Registry)
        clone.__dict__.update(self.__dict__, dirs=[*dirs, *self.dirs])
        return clone

    def _files(self) -> dict[str, Path]:
        found: dict[str, Path] = {}
        for d in reversed(self.dirs):  # earlier directories override later ones
            if not d.is_dir():
                continue
            if self.filename:
                found.update({p.parent.name: p for p in sorted(d.glob(f"*/{self.filename}"))})
            else:
                found.update({p.stem: p for p in sorted(d.glob("*.yaml"))})
        return found

    def names(self) -> list[str]:
        return sorted(self._files())

    def path(self, name: str) -> Path:
        files = self._files()
        if name not in files:
            raise SpecError([unknown_name(self.kind, name, sorted(files))])
        return files[name]

    def get(self, name: str) -> T:
        spec = parse_yaml_file(self.model, self.path(name))
        if getattr(spec, "name", name) != name:
            raise SpecError([f"{self.path(name)}: name {spec.name!r} does not match its file name {name!r}"])
        return spec
