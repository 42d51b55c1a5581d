"""What the inspector's judge reads about a run, built only from what the sweep recorded outside the agent's
reach: the run's spec and result, its submissions (the ledger), its transcript (agent.log, as numbered turns,
recording/turns.py) with each tool output cut, and the diff of its code at each submission with the new file's
line numbers, so the judge can cite a turn, or a snapshot, file and line, that the inspector can check.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from a2rl.errors import SpecError
from a2rl.recording.snapshots import load_snapshots, snapshot_dir
from a2rl.recording.turns import Turn, transcript_turns
from a2rl.records import RecordError
from a2rl.spec.agents import agent_registry
from a2rl.store.results import load_result
from a2rl.store.sweepdir import SweepDir

TEXT_CHARS = 1500  # the agent's own words and a tool call's arguments, cut to this
DIFF_LINE_CHARS = 300
HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,\d+)? @@")


def cut(text: str, limit: int) -> str:
    """`text` within `limit` characters: its head and tail, with what was left out counted between them."""
    if len(text) <= limit:
        return text
    half = max(1, (limit - 40) // 2)
    return f"{text[:half]} …[{len(text) - 2 * half} chars cut]… {text[-half:]}"


@dataclass
class Material:
    """The run's material as the judge reads it, and what a cited place must match to count as evidence."""

    text: str
    turns: int
    snapshots: int
    submissions: int
    truncated: bool
    # (seq, path) → the new file's line numbers the diffs show; turn numbers shown
    lines: dict[tuple[int, str], set[int]] = field(default_factory=dict)
    shown_turns: set[int] = field(default_factory=set)


def transcript_parser(sweep: SweepDir, agent: str) -> str:
    """The stack's `transcript:` parser; `none` (plain lines) when the stack is no longer found."""
    try:
        return agent_registry([Path(p) for p in sweep.spec.agent_paths]).get(agent).transcript
    except (SpecError, KeyError, OSError):
        return "none"


def render_turn(t: Turn, output_chars: int) -> str:
    """One turn; its further lines indented, so that only our own headers start a line: text the agent wrote
    cannot pass for another turn, a snapshot or a diff line."""
    if t.kind == "output":
        head, text = f"[turn {t.n}] output{f' of {t.tool}' if t.tool else ''}", cut(t.text, output_chars)
    elif t.kind == "call":
        head, text = f"[turn {t.n}] call {t.tool}", cut(t.text, TEXT_CHARS)
    else:
        head, text = f"[turn {t.n}] {'agent' if t.kind == 'text' else 'log'}", cut(t.text, TEXT_CHARS)
    return f"{head}: " + text.replace("\r", "").replace("\n", "\n    | ")


def numbered_diff(diff: str) -> tuple[list[str], dict[str, set[int]]]:
    """A unified diff with the new file's line number before each added and context line, and those numbers per
    file (what the judge may cite)."""
    out, shown, path, n = [], {}, None, 0
    for line in diff.splitlines():
        if line.startswith("+++ "):
            target = line[4:]
            path = None if target == "/dev/null" else target.removeprefix("b/")
            out.append(f"file {path}" if path else "file removed")
        elif line.startswith("--- ") or line.startswith("\\ "):
            continue
        elif (m := HUNK.match(line)) is not None:
            n = int(m.group(1))
            out.append(line)
        elif line.startswith("Binary file"):
            out.append(line)
        elif path is not None and line[:1] in ("+", " "):
            shown.setdefault(path, set()).add(n)
            out.append(f"{n:5d} {line[0]} {line[1:][:DIFF_LINE_CHARS]}")
            n += 1
        elif line[:1] == "-":
            out.append(f"      - {line[1:][:DIFF_LINE_CHARS]}")
    return out, shown


def build_material(sweep: SweepDir, run_id: str, *, max_chars: int, output_chars: int) -> Material:
    run = sweep.run(run_id)
    result = load_result(sweep, run_id)
    entries = sweep.ledger.entries(run_id)
    try:
        snaps = load_snapshots(sweep.root, run_id)
    except RecordError:
        snaps = []
    log_path = sweep.run_dir(run_id) / "agent.log"
    log_text = log_path.read_text(errors="replace") if log_path.exists() else ""
    turns = transcript_turns(transcript_parser(sweep, run.agent.name), log_text)

    head = [
        f"# Run {run_id}",
        f"task {run.task}; agent {run.agent.key}; driver {run.driver}; base model {run.model.name} "
        f"({run.model.path}); budget {run.budget_s:.0f} s; "
        + (
            f"status {result.status}" + (f" ({result.failure_reason})" if result.failure_reason else "")
            if result
            else "no result yet"
        ),
        "",
        f"## Submissions ({len(entries)})",
    ]
    for e in entries:
        what = f"score {e.score:.2f}" if e.score is not None else f"invalid: {e.error or 'no reason'}"
        extra = " (a copy of the base model)" if e.copy_of_base else ""
        head.append(f"- seq {e.seq} {e.submission_id}: {what}{extra}; model {e.model_path}")

    code: list[str] = [f"## Code at each submission ({len(snaps)} snapshots; diffs against the previous one)"]
    lines: dict[tuple[int, str], set[int]] = {}
    for s in snaps:
        diff_path = snapshot_dir(sweep.root, run_id) / f"{s.seq:03d}.diff"
        diff = diff_path.read_text(errors="replace") if diff_path.exists() else ""
        rendered, shown = numbered_diff(diff)
        lines.update({(s.seq, p): ns for p, ns in shown.items()})
        skipped = f"; not recorded: {', '.join(f'{k.path} ({k.reason})' for k in s.skipped)}" if s.skipped else ""
        code += [f"### snapshot seq {s.seq} ({s.submission_id}){skipped}", *rendered]

    rendered_turns = [render_turn(t, output_chars) for t in turns]
    title = f"## Transcript ({len(turns)} turns; tool outputs cut to {output_chars} chars)"
    fixed = "\n".join(head) + "\n\n" + "\n".join(code) + "\n\n" + title + "\n"
    budget = max_chars - len(fixed)
    shown_turns, truncated = list(range(len(turns))), False
    if sum(len(r) + 1 for r in rendered_turns) > budget:  # keep the first and last turns, cut the middle
        truncated = True
        keep_head, keep_tail, used = [], [], 0
        i, j = 0, len(turns) - 1
        while i <= j:
            nxt = rendered_turns[i] if len(keep_head) <= len(keep_tail) else rendered_turns[j]
            if used + len(nxt) + 1 > max(0, budget - 100):
                break
            used += len(nxt) + 1
            if len(keep_head) <= len(keep_tail):
                keep_head.append(i)
                i += 1
            else:
                keep_tail.append(j)
                j -= 1
        shown_turns = keep_head + sorted(keep_tail)
    body: list[str] = []
    for k, idx in enumerate(shown_turns):
        if k and idx != shown_turns[k - 1] + 1:
            body.append(f"…[turns {shown_turns[k - 1] + 2}-{idx} left out to fit the judge's context]…")
        body.append(rendered_turns[idx])
    text = fixed + "\n".join(body)
    if len(text) > max_chars:  # the code alone is over the limit
        text, truncated = cut(text, max_chars), True
    return Material(
        text=text,
        turns=len(turns),
        snapshots=len(snaps),
        submissions=len(entries),
        truncated=truncated,
        lines=lines,
        shown_turns={turns[i].n for i in shown_turns},
    )
