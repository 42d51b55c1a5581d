"""User-facing errors: each line names where the problem is and what was wrong."""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Iterable

from pydantic import BaseModel, ValidationError


class SpecError(Exception):
    """A spec file (sweep, task, agent, cluster) is invalid; `lines` are shown to the user one per line."""

    def __init__(self, lines: list[str]):
        super().__init__("\n".join(lines))
        self.lines = lines

    def prefixed(self, prefix: str) -> "SpecError":
        return SpecError([f"{prefix}: {line}" for line in self.lines])


class InfraError(RuntimeError):
    """Grading could not run for a reason outside the submission (a judge endpoint down...): the grader
    retries later instead of recording the submission as invalid."""


def field_path(loc: tuple) -> str:
    """('agents', 1, 'name') → 'agents[1].name'"""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("function-after", "function-before", "function-wrap") or str(part).startswith(
            ("function-", "union[")
        ):
            continue
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


def closest(name: object, known: Iterable[str]) -> str | None:
    """The known name closest to a mistyped one, if one is close enough (words swapped too: gpu_gres, gres_gpu)."""
    known = list(known)
    close = difflib.get_close_matches(str(name), known, n=1, cutoff=0.6)
    if close:
        return close[0]
    words = {"_".join(sorted(k.split("_"))): k for k in known}
    close = difflib.get_close_matches("_".join(sorted(str(name).split("_"))), list(words), n=1, cutoff=0.8)
    return words[close[0]] if close else None


def unknown_name(kind: str, name: str, known: Iterable[str]) -> str:
    """One wording for every unknown name: "unknown task 'arth' (did you mean 'arith'? known: arith, echo)"."""
    known = list(known)
    hint = f"did you mean {c!r}? " if (c := closest(name, known)) else ""
    return f"unknown {kind} {name!r} ({hint}known: {', '.join(known) or 'none'})"


def _members(tp: object) -> list[object]:
    """The types a field's annotation may hold: Optional, unions and Annotated unwrapped."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _members(typing.get_args(tp)[0])
    if origin is typing.Union or isinstance(tp, types.UnionType):
        return [m for arg in typing.get_args(tp) for m in _members(arg)]
    return [tp]


def _step(tp: object, part: object) -> object | None:
    """The type at `part` of a value of type `tp` (a field, a list item, a dict value, a union member's tag)."""
    for m in _members(tp):
        origin = typing.get_origin(m)
        if isinstance(m, type) and issubclass(m, BaseModel):
            if part == m.__name__:
                return m
            if isinstance(part, str) and part in m.model_fields:
                return m.model_fields[part].annotation
        elif origin is list and isinstance(part, int):
            return typing.get_args(m)[0]
        elif origin is dict:
            return typing.get_args(m)[1]
    return None


def known_keys(model: type[BaseModel], loc: tuple) -> list[str]:
    """The keys a mapping at `loc` inside `model` may hold ([] where that is not a model's mapping)."""
    tp: object | None = model
    for part in loc:
        tp = _step(tp, part)
        if tp is None:
            return []
    return next((list(m.model_fields) for m in _members(tp) if isinstance(m, type) and issubclass(m, BaseModel)), [])


def _unknown_key(model: type[BaseModel] | None, loc: tuple) -> str:
    known = known_keys(model, loc[:-1]) if model else []
    if not known:
        return "unknown key"
    c = closest(loc[-1], known)
    return f"unknown key (did you mean {c!r}?)" if c else f"unknown key (known: {', '.join(known)})"


def _other_branch(err: dict, errors: list[dict]) -> bool:
    """A mapping given where a field takes a name or a mapping (`agents: [name | {name, args}]`) fails the name
    branch too; only the mapping branch's errors say what is wrong."""
    loc = err["loc"][:-1] if err["loc"][-1:] == ("str",) else err["loc"]
    return (
        err["type"] == "string_type"
        and isinstance(err.get("input"), dict)
        and any(o is not err and o["loc"][: len(loc)] == loc for o in errors)
    )


def _model_names(tp: object, seen: set[str] | None = None) -> set[str]:
    """The class names of the models reachable from `tp`: pydantic tags a union member's errors with them."""
    seen = set() if seen is None else seen
    for m in _members(tp):
        if isinstance(m, type) and issubclass(m, BaseModel) and m.__name__ not in seen:
            seen.add(m.__name__)
            for f in m.model_fields.values():
                _model_names(f.annotation, seen)
        for arg in typing.get_args(m) if typing.get_origin(m) in (list, dict) else ():
            _model_names(arg, seen)
    return seen


def format_validation_error(e: ValidationError, model: type[BaseModel] | None = None) -> list[str]:
    """One line per error; with the validated `model`, an unknown key or value names the closest known one."""
    lines, errors, tags = [], e.errors(), _model_names(model) if model else set()
    for err in errors:
        if _other_branch(err, errors):
            continue
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p in ("str", "int", "dict", "list")))
        loc = tuple(p for p in loc if p not in tags)
        where = field_path(loc)
        if err["type"] == "extra_forbidden":
            lines.append(f"{where}: {_unknown_key(model, err['loc'])}")
            continue
        msg = err["msg"].removeprefix("Value error, ")
        bad = err.get("input")
        shown = "" if err["type"] == "missing" or isinstance(bad, (dict, list)) else f" (got {bad!r})"
        if err["type"] == "literal_error" and (c := closest(bad, re.findall(r"'([^']*)'", err["ctx"]["expected"]))):
            shown = f" (got {bad!r}; did you mean {c!r}?)"
        lines.append(f"{where}: {msg}{shown}")
    return lines


class RootError(SpecError):
    """A directory a2rl writes outside the sweep (scratch, data, cache) cannot be created or used: one line that
    names the setting and the environment variable that move it."""

    def __init__(self, line: str):
        super().__init__([line])
