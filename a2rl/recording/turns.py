"""An agent's transcript as turns: what it said, each tool call (its command or arguments) and each tool's output,
read from the same runs/<id>/agent.log the usage parsers read (transcripts.py), by the stack's `transcript:`
parser. A stack without a turn reader here (none, litellm, openhands) gets its log's plain lines, one turn each.

Turns are numbered from 1 in the order the CLI printed them; the inspector's judge cites these numbers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Literal

from a2rl.recording.transcripts import json_objects

TurnKind = Literal["text", "call", "output", "log"]


@dataclass(frozen=True)
class Turn:
    n: int  # 1-based
    kind: TurnKind  # text: the agent's own words; call: a tool call; output: a tool's result; log: plain lines
    text: str
    tool: str = ""  # the tool's name for call and output


Raw = tuple[TurnKind, str, str]  # kind, text, tool


def _args(value: Any) -> str:
    """A tool call's arguments: its command where it has one, else its JSON."""
    if isinstance(value, dict):
        for key in ("command", "cmd", "patchText"):
            if isinstance(value.get(key), str):
                rest = {k: v for k, v in value.items() if k not in (key, "description", "timeout")}
                return value[key] + (f"  {json.dumps(rest)}" if rest else "")
        return json.dumps(value, ensure_ascii=False)
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_content_text(c.get("text", c.get("content", ""))) for c in content if isinstance(c, dict))
    return "" if content is None else json.dumps(content)


def _claude(o: dict) -> Iterator[Raw]:
    # stream-json: {"type": "assistant"|"user", "message": {"content": [text | tool_use | tool_result blocks]}}
    if o.get("type") not in ("assistant", "user"):
        return
    for block in (o.get("message") or {}).get("content") or []:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text" and block.get("text"):
            yield "text", block["text"], ""
        elif kind == "tool_use":
            yield "call", _args(block.get("input")), str(block.get("name", ""))
        elif kind == "tool_result":
            yield "output", _content_text(block.get("content")), ""


def _codex(o: dict) -> Iterator[Raw]:
    # exec --json: {"type": "item.completed", "item": {"type": agent_message | command_execution | file_change ...}}
    if o.get("type") != "item.completed" or not isinstance(o.get("item"), dict):
        return
    item = o["item"]
    kind = item.get("type")
    if kind in ("agent_message", "reasoning") and item.get("text"):
        yield "text", item["text"], ""
    elif kind == "command_execution":
        yield "call", str(item.get("command", "")), "shell"
        yield "output", f"{item.get('aggregated_output', '')}(exit {item.get('exit_code')})", "shell"
    elif kind == "file_change":
        changes = ", ".join(
            f"{c.get('kind')} {c.get('path')}" for c in item.get("changes") or [] if isinstance(c, dict)
        )
        yield "call", changes, "file_change"
    elif kind in ("mcp_tool_call", "web_search"):
        yield "call", json.dumps({k: v for k, v in item.items() if k not in ("id", "type")}), kind


def _opencode(o: dict) -> Iterator[Raw]:
    # run --format json: {"type": "text", "part": {"text"}}, {"type": "tool_use", "part": {"tool", "state": {input,
    # output}}}
    part = o.get("part") if isinstance(o.get("part"), dict) else {}
    if o.get("type") == "text" and part.get("text"):
        yield "text", part["text"], ""
    elif o.get("type") == "tool_use":
        state = part.get("state") or {}
        tool = str(part.get("tool", ""))
        yield "call", _args(state.get("input")), tool
        if "output" in state:
            yield "output", _content_text(state.get("output")), tool


def _gemini(o: dict) -> Iterator[Raw]:
    # -p --output-format json: one document whose `response` is the agent's last words (no tool calls in it)
    if isinstance(o.get("response"), str) and o["response"]:
        yield "text", o["response"], ""


READERS: dict[str, Callable[[dict], Iterator[Raw]]] = {
    "claude": _claude,
    "codex": _codex,
    "opencode": _opencode,
    "gemini": _gemini,
}


def transcript_turns(parser: str, log_text: str) -> list[Turn]:
    """The turns of a transcript. The run's own `[a2rl ...]` lines are kept as log turns (they say when the
    agent started, was warned, submitted...); a stack's JSON records are read by its reader, other lines kept."""
    reader = READERS.get(parser)
    raw: list[Raw] = []
    for line in log_text.splitlines():
        if reader is not None and line.lstrip().startswith("{"):
            objs = list(json_objects(line))
            if objs:
                for o in objs:
                    raw += reader(o)
                continue
        if line.strip():
            raw.append(("log", line, ""))
    if reader is not None and not any(k != "log" for k, _, _ in raw):  # a pretty-printed document (gemini)
        found = [r for o in json_objects(log_text) for r in reader(o)]
        if found:  # the document's lines are not turns of their own: the run's lines, then what it says
            own = [line for line in log_text.splitlines() if line.startswith("[a2rl ")]
            raw = [("log", line, "") for line in own] + found
    return [Turn(n, kind, text, tool) for n, (kind, text, tool) in enumerate(raw, 1)]
