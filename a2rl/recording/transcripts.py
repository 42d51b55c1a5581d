"""Token use and cost from an agent's transcript. Each stack names a parser (`transcript:` in its YAML) for the
CLI's machine-readable output, which the run keeps in runs/<id>/agent.log (mixed with the run's own `[a2rl ...]`
lines and stderr: anything that is not a JSON object is ignored). Numbers a CLI does not report stay None; no
pricing table is guessed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Iterator

from a2rl.recording import nofollow
from a2rl.store.results import AgentUsage


def json_objects(text: str) -> Iterator[dict[str, Any]]:
    """JSON objects that start a line (one-line JSONL events or a pretty-printed document)."""
    decoder, pos = json.JSONDecoder(), 0
    while (start := text.find("{", pos)) >= 0:
        if text[text.rfind("\n", 0, start) + 1 : start].strip():
            pos = start + 1
            continue
        try:
            obj, pos = decoder.raw_decode(text, start)
        except ValueError:
            pos = start + 1
            continue
        if isinstance(obj, dict):
            yield obj


def _n(d: Any, *keys: str) -> int:
    return sum(int(d.get(k) or 0) for k in keys) if isinstance(d, dict) else 0


Counts = tuple[int, int, int, float | None]  # input (all), cached, output, cost


def _claude(o: dict) -> Counts | None:
    # `claude -p --output-format stream-json`: one {"type": "result", "usage": {...}, "total_cost_usd"} per session
    if o.get("type") != "result":
        return None
    u = o.get("usage") or {}
    return (
        _n(u, "input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"),
        _n(u, "cache_read_input_tokens"),
        _n(u, "output_tokens"),
        o.get("total_cost_usd"),
    )


def _codex(o: dict) -> Counts | None:
    # `codex exec --json`: {"type": "turn.completed", "usage": {input_tokens, cached_input_tokens, output_tokens}}
    if o.get("type") != "turn.completed":
        return None
    u = o.get("usage") or {}
    return _n(u, "input_tokens"), _n(u, "cached_input_tokens"), _n(u, "output_tokens"), None


def _gemini(o: dict) -> Counts | None:
    # `gemini -p --output-format json`: {"response", "stats": {"models": {<model>: {"tokens": {prompt, cached,
    # candidates, ...}}}}}
    models = (o.get("stats") or {}).get("models")
    if not isinstance(models, dict):
        return None
    toks = [m.get("tokens") or {} for m in models.values() if isinstance(m, dict)]
    return (
        sum(_n(t, "prompt") for t in toks),
        sum(_n(t, "cached") for t in toks),
        sum(_n(t, "candidates", "thoughts") for t in toks),
        None,
    )


def _opencode(o: dict) -> Counts | None:
    # `opencode run --format json`: {"type": "step_finish", "part": {"tokens": {input, output, reasoning,
    # cache: {read, write}}, "cost"}} per model step
    if o.get("type") != "step_finish":
        return None
    part = o.get("part") or {}
    t = part.get("tokens") or {}
    cache = t.get("cache") or {}
    return (
        _n(t, "input") + _n(cache, "read", "write"),
        _n(cache, "read"),
        _n(t, "output", "reasoning"),
        part.get("cost"),
    )


def _litellm(o: dict) -> Counts | None:
    # OpenAI-style completion records as litellm logs them (RD-Agent): {"usage": {prompt_tokens,
    # completion_tokens, prompt_tokens_details: {cached_tokens}}, "response_cost"}
    u = o.get("usage")
    if not isinstance(u, dict) or "prompt_tokens" not in u:
        return None
    return (
        _n(u, "prompt_tokens"),
        _n(u.get("prompt_tokens_details"), "cached_tokens"),
        _n(u, "completion_tokens"),
        o.get("response_cost"),
    )


def _openhands(objs: list[dict]) -> AgentUsage:
    # OpenHands 1.x keeps running totals in its conversation's base_state.json (read with the log, see
    # AgentStack.transcript_files): {"stats": {"usage_to_metrics": {<usage>: {"accumulated_cost",
    # "accumulated_token_usage": {prompt_tokens, completion_tokens, cache_read_tokens}, "response_latencies":
    # [one per model call]}}}}, written when the conversation ends; the last state printed is the run's
    last = None
    for o in objs:
        metrics = (o.get("stats") or {}).get("usage_to_metrics") if isinstance(o.get("stats"), dict) else None
        if isinstance(metrics, dict):
            last = [m for m in metrics.values() if isinstance(m, dict)]
    if last is None or not any(m.get("response_latencies") for m in last):  # the state of a CLI stopped early
        return AgentUsage(parser="openhands")  # holds no totals yet, only zeros
    usage = [m.get("accumulated_token_usage") or {} for m in last]
    costs = [m["accumulated_cost"] for m in last if isinstance(m.get("accumulated_cost"), (int, float))]
    return AgentUsage(
        parser="openhands",
        calls=sum(len(m.get("response_latencies") or []) for m in last),
        input_tokens=sum(_n(u, "prompt_tokens") for u in usage),
        cached_input_tokens=sum(_n(u, "cache_read_tokens") for u in usage),
        output_tokens=sum(_n(u, "completion_tokens") for u in usage),
        cost_usd=round(sum(costs), 6) if costs else None,
    )


_SUMMED: dict[str, Callable[[dict], Counts | None]] = {
    "claude": _claude,
    "codex": _codex,
    "gemini": _gemini,
    "opencode": _opencode,
    "litellm": _litellm,
}


TRANSCRIPT_FILE_MAX = 16 << 20


def transcript_files(home: Path, globs: list[str]) -> str:
    """The text of a stack's transcript_files under the agent's HOME, to parse with its log: regular files only
    (a link the agent planted is not followed out of its workspace, a FIFO never opened), each up to
    TRANSCRIPT_FILE_MAX bytes; read while the agent may still change them (nofollow.py)."""
    rels = sorted({p.relative_to(home) for g in globs for p in home.glob(g)})
    texts = (nofollow.read_head(home, rel, TRANSCRIPT_FILE_MAX) for rel in rels)
    return "".join("\n" + t.decode(errors="replace") + "\n" for t in texts if t is not None)


def parse_usage(parser: str, transcript: str) -> AgentUsage | None:
    """Token and cost totals of a transcript; None for stacks without a parser."""
    if parser == "none":
        return None
    objs = list(json_objects(transcript))
    if parser == "openhands":
        return _openhands(objs)
    counts = [c for c in map(_SUMMED[parser], objs) if c is not None]
    if not counts:
        return AgentUsage(parser=parser)
    costs = [c[3] for c in counts if c[3] is not None]
    return AgentUsage(
        parser=parser,
        calls=len(counts),
        input_tokens=sum(c[0] for c in counts),
        cached_input_tokens=sum(c[1] for c in counts),
        output_tokens=sum(c[2] for c in counts),
        cost_usd=round(sum(costs), 6) if costs else None,
    )


def cli_failure(
    parser: str, cli: str, log_text: str, usage: AgentUsage | None, *, status: str, exit_code: int | None
) -> str | None:
    """What went wrong with an LLM CLI, for the run's failure reason: it crashed (non-zero exit), printed
    nothing, or printed no transcript record its parser reads; None when its run looks whole (and for stacks
    without a transcript). `log_text` is agent.log, whose `[a2rl ...]` lines are the run's own."""
    if parser == "none":
        return None
    own = [line for line in log_text.splitlines() if line.strip() and not line.startswith("[a2rl ")]
    stopped = " before it was stopped" if status == "timeout" else ""
    if status == "ok" and exit_code not in (0, None):
        last = own[-1].strip()[:300] if own else "none"
        return f"the agent CLI `{cli}` exited with code {exit_code} (its last output line: {last})"
    if not own:
        return f"the agent CLI `{cli}` printed nothing{stopped}"
    if usage is not None and usage.calls == 0:
        return (
            f"the agent CLI `{cli}` printed no transcript record the `{parser}` parser reads{stopped} "
            f"({len(own)} line(s) of other output): its tokens and cost are unknown"
        )
    return None


# --- turns: what the agent said and did, in order, for the trajectory viewer (reporting/viewer.py) ---

Turn = dict[str, Any]  # {"k": kind, "t": tool, "x": text}: kinds below
TURN_KINDS = ("text", "tool", "output", "error", "log", "a2rl")  # a2rl: the run's own `[a2rl ...]` lines
TURN_TEXT_MAX = 4000  # a tool's output is cut to this many characters (head and tail kept)


def cut(text: str, limit: int = TURN_TEXT_MAX) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[… {len(text) - limit} characters cut …]\n{text[-half:]}"


def _flat(v: Any) -> str:
    """A tool's input or output as text: a string as is, a {command} as its command, content blocks joined."""
    if isinstance(v, str):
        return v
    if isinstance(v, list):
        return "\n".join(_flat(b.get("text", b) if isinstance(b, dict) else b) for b in v)
    if isinstance(v, dict) and isinstance(v.get("command"), str):
        return v["command"]
    return json.dumps(v, ensure_ascii=False)


def _claude_turns(o: dict) -> list[tuple[str, str, str]]:
    msg = o.get("message") if isinstance(o.get("message"), dict) else {}
    content = msg.get("content") if isinstance(msg.get("content"), list) else []
    out = []
    for b in (b for b in content if isinstance(b, dict)):
        if b.get("type") == "text":
            out.append(("text", "", str(b.get("text", ""))))
        elif b.get("type") == "thinking":
            out.append(("text", "thinking", str(b.get("thinking", ""))))
        elif b.get("type") == "tool_use":
            out.append(("tool", str(b.get("name", "")), _flat(b.get("input"))))
        elif b.get("type") == "tool_result":
            out.append(("error" if b.get("is_error") else "output", "", _flat(b.get("content", ""))))
    if o.get("type") == "result" and o.get("is_error"):
        out.append(("error", "", str(o.get("result", ""))))
    return out


def _codex_turns(o: dict) -> list[tuple[str, str, str]]:
    if o.get("type") == "error":
        return [("error", "", str(o.get("message", "")))]
    item = o.get("item") if o.get("type") == "item.completed" and isinstance(o.get("item"), dict) else None
    if item is None:
        return []
    kind = item.get("type")
    if kind in ("agent_message", "reasoning"):
        return [("text", "" if kind == "agent_message" else "reasoning", str(item.get("text", "")))]
    if kind == "command_execution":
        failed = item.get("exit_code") not in (0, None)
        return [
            ("tool", "shell", str(item.get("command", ""))),
            ("error" if failed else "output", "", str(item.get("aggregated_output", ""))),
        ]
    if kind == "file_change":
        changes = item.get("changes") or []
        return [("tool", "file_change", "\n".join(f"{c.get('kind')} {c.get('path')}" for c in changes))]
    if kind == "error":
        return [("error", "", str(item.get("message", "")))]
    return [("tool", str(kind), _flat({k: v for k, v in item.items() if k not in ("id", "type")}))]


def _opencode_turns(o: dict) -> list[tuple[str, str, str]]:
    part = o.get("part") if isinstance(o.get("part"), dict) else {}
    if o.get("type") == "text":
        return [("text", "", str(part.get("text", "")))]
    if o.get("type") == "tool_use":
        state = part.get("state") if isinstance(part.get("state"), dict) else {}
        failed = state.get("status") == "error"
        return [
            ("tool", str(part.get("tool", "")), _flat(state.get("input"))),
            ("error" if failed else "output", "", _flat(state.get("error" if failed else "output", ""))),
        ]
    if o.get("type") == "error":
        return [("error", "", _flat(o.get("error", o)))]
    return []


def _gemini_turns(o: dict) -> list[tuple[str, str, str]]:
    # `--output-format json` prints one document at the end: the final answer only, no turns
    out = [("text", "", o["response"])] if isinstance(o.get("response"), str) else []
    return out + ([("error", "", _flat(o["error"]))] if o.get("error") else [])


_TURNS: dict[str, Callable[[dict], list[tuple[str, str, str]]]] = {
    "claude": _claude_turns,
    "codex": _codex_turns,
    "opencode": _opencode_turns,
    "gemini": _gemini_turns,
}


def parse_turns(parser: str, transcript: str) -> tuple[list[Turn], list[tuple[int, int]]]:
    """The agent's turns in the order the log holds them, each cut to TURN_TEXT_MAX, and the token curve:
    (turns so far, tokens so far) after each record that reports usage. A JSON record the stack's parser reads
    becomes its turns (assistant text, tool call, output, error); other JSON records are left out (kept as log
    text for stacks without a turn parser); lines that are not JSON are `log` turns (a line with the indented
    lines after it) or the run's own `a2rl` lines. Stacks without a turn parser (none, openhands, litellm) have
    log turns only. Turns are numbered by their place in the list
    (1-based in the viewer and the inspector's evidence)."""
    turns: list[Turn] = []
    curve: list[tuple[int, int]] = []
    of, counted, tokens = _TURNS.get(parser), _SUMMED.get(parser), 0
    decoder, pos, log = json.JSONDecoder(), 0, []

    def add(kind: str, tool: str, text: str) -> None:
        # a log turn is a line with the indented lines and records after it (a traceback, a command's answer)
        if log and (kind != "log" or text[:1] not in (" ", "\t", "{", "}")):
            turns.append({"k": "log", "t": "", "x": cut("".join(log))})
            log.clear()
        if kind == "log":
            log.append(text)
        elif text.strip() or tool:
            turns.append({"k": kind, "t": tool, "x": cut(text)})

    while pos < len(transcript):
        end = transcript.find("\n", pos)
        end = len(transcript) if end < 0 else end + 1
        if transcript.startswith("{", pos):
            try:
                obj, stop = decoder.raw_decode(transcript, pos)
            except ValueError:
                obj = None
            if isinstance(obj, dict):
                nl = transcript.find("\n", stop)
                nl = len(transcript) if nl < 0 else nl + 1
                # text after the object on its line (a CLI that ended without a newline) is read as a line
                after = nl if not transcript[stop:nl].strip() else stop
                if of is None:  # no turn parser: the record is part of the log (`a2rl submit`'s answer ...)
                    add("log", "", transcript[pos:after])
                for turn in of(obj) if of else []:
                    add(*turn)
                if counted and (c := counted(obj)) is not None:
                    tokens += c[0] + c[2]
                    curve.append((len(turns), tokens))
                pos = after
                continue
        line = transcript[pos:end]
        if line.startswith("[a2rl "):
            add("a2rl", "", line.rstrip("\n"))
        elif line.strip():
            add("log", "", line)
        pos = end
    add("a2rl", "", "")  # flushes the last log lines (an empty turn is not kept)
    return turns, curve
