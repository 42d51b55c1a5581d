"""User-facing errors: each line names where the problem is and what was wrong."""

from __future__ import annotations

from pydantic import ValidationError


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


def format_validation_error(e: ValidationError) -> list[str]:
    lines = []
    for err in e.errors():
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p in ("str", "int", "dict", "list")))
        where = field_path(loc)
        if err["type"] == "extra_forbidden":
            lines.append(f"{where}: unknown key")
            continue
        msg = err["msg"].removeprefix("Value error, ")
        bad = err.get("input")
        shown = "" if err["type"] == "missing" or isinstance(bad, (dict, list)) else f" (got {bad!r})"
        lines.append(f"{where}: {msg}{shown}")
    return lines


class RootError(SpecError):
    """A directory a2rl writes outside the sweep (scratch, data, cache) cannot be created or used: one line that
    names the setting and the environment variable that move it."""

    def __init__(self, line: str):
        super().__init__([line])
