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
