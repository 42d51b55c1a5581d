"""A run's trajectory viewer, runs/<id>/report/viewer/index.html: the agent's turns in order (from its stack's
transcript parser, recording/turns.py, numbered as the inspector's evidence cites them), the submissions at their
budget-clock positions with scores and validity, the code diff between consecutive snapshots, the reference agent's
stage records, the inspector's verdicts beside the turns they cite, and the score, budget and token curves. Filter by
kind, search, jump to a submission.

Plain files, no network: it opens from a shared file system. A 12-hour transcript (tens of MB) stays usable
because the page holds only the run's summary; the turns are in chunk files (turns-NNNN.js) and each diff in
its own (diff-NNN.js), loaded on demand by <script> tags (a browser refuses fetch() of file:// URLs) as the
reader scrolls to them, opens them or searches.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
from pathlib import Path

from a2rl.recording.snapshots import snapshot_dir
from a2rl.recording.turns import transcript_turns
from a2rl.records import RecordError, atomic_write_text
from a2rl.reporting.metrics import stage_log
from a2rl.store.ledger import LedgerEntry
from a2rl.store.results import RunResult
from a2rl.store.sweepdir import SweepDir
from a2rl.store.verdicts import load_final_verdicts

VIEWER_DIR = "viewer"
CHUNK_CHARS = 400_000  # of turn text per chunk file: one loads in a few ms
DIFF_MAX = 400_000  # characters of one snapshot's diff shown
TURN_MAX = 4000  # characters of one turn shown (head and tail): a tool's output can be megabytes
FAILED = re.compile(r"\(exit -?[1-9]\d*\)$|^Traceback \(most recent call last\)|^[\w.]*(Error|Exception)\b")


def cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[… {len(text) - limit} characters cut …]\n{text[-half:]}"


def viewer_turns(parser: str, log_text: str) -> list[dict]:
    """The turns as the page shows them, {n, k: kind, t: tool, x: text cut to TURN_MAX}: a call is `tool`, a
    failed command's output, a traceback or an error line is `error`, the run's own lines are `a2rl`."""
    out = []
    for t in transcript_turns(parser, log_text):
        kind = {"call": "tool"}.get(t.kind, t.kind)
        if kind in ("output", "log") and FAILED.search(t.text.strip()):
            kind = "error"
        elif kind == "log" and t.text.startswith("[a2rl "):
            kind = "a2rl"
        out.append({"n": t.n, "k": kind, "t": t.tool, "x": cut(t.text, TURN_MAX)})
    return out


def _js(obj) -> str:
    """JSON safe inside a <script> element: no `<` at all (an agent's text may hold `</script>` or `<!--`)."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).replace("<", "\\u003c")


def viewer_path(sweep: SweepDir, run_id: str) -> Path:
    return sweep.run_dir(run_id) / "report" / VIEWER_DIR / "index.html"


def _chunks(turns: list[dict]) -> list[list[dict]]:
    out, size = [[]], 0
    for t in turns:
        if size > CHUNK_CHARS:
            out.append([])
            size = 0
        out[-1].append(t)
        size += len(t["x"]) + 40
    return out if out[0] else []


def viewer_submissions(entries: list[LedgerEntry], result: RunResult, turns: list[dict]) -> list[dict]:
    """The viewer's row of each submission: its clocks, tokens, verdict, and the turn that made it (if shown)."""
    submissions = []
    for i, e in enumerate(entries):
        where = next((t["n"] for t in turns if e.submission_id in t["x"]), None)  # the turn that made it, if shown
        submissions.append(
            {
                "seq": e.seq,
                "id": e.submission_id,
                "budget_s": e.budget_used_s
                if e.budget_used_s is not None
                else (result.submitted_budget_s[i] if i < len(result.submitted_budget_s) else None),
                "wall_s": round(e.submitted_at - result.started_at, 1),
                "tokens": e.tokens,
                "status": e.status,
                "score": e.score,
                "error": e.error,
                "copy_of_base": e.copy_of_base,
                "turn": where,
            }
        )
    return submissions


def write_viewer(sweep: SweepDir, run_id: str, result: RunResult) -> Path:
    """Build the run's viewer from what the sweep recorded (it can be rebuilt at any time); returns its page."""
    run_dir = sweep.run_dir(run_id)
    log = run_dir / "agent.log"
    parser = result.usage.parser if result.usage else "none"
    turns = viewer_turns(parser, log.read_text(errors="replace") if log.exists() else "")
    submissions = viewer_submissions(sweep.ledger.entries(run_id), result, turns)
    snaps = snapshot_dir(sweep.root, run_id)
    final = viewer_path(sweep, run_id).parent
    # built beside the old one and swapped in: a reader never sees half a viewer, nor an earlier build's chunks
    out = final.with_name(f".{final.name}.{os.getpid()}.tmp")
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    diffs = []
    for s in submissions:
        path = snaps / f"{s['seq']:03d}.diff"
        if path.exists():
            text = path.read_text(errors="replace")
            atomic_write_text(out / f"diff-{s['seq']:03d}.js", f"A2RL.diff({s['seq']},{_js(cut(text, DIFF_MAX))});\n")
            diffs.append({"seq": s["seq"], "lines": text.count("\n")})
    chunks = _chunks(turns)
    for i, chunk in enumerate(chunks):
        atomic_write_text(out / f"turns-{i:04d}.js", f"A2RL.chunk({i},{_js(chunk)});\n")
    stages = stage_log(sweep, run_id)
    try:
        verdicts = [v.model_dump(mode="json") for v in load_final_verdicts(run_dir)]
        verdict_error = None
    except RecordError as e:
        verdicts, verdict_error = [], str(e)
    data = {
        "run": run_id,
        "status": result.status,
        "failure": result.failure_reason,
        "parser": parser,
        "baseline": result.baseline,
        "best": result.best,
        "budget_s": result.budget_s,
        "agent_s": result.agent_seconds,
        "wall_s": result.wall_seconds,
        "usage": result.usage.model_dump(mode="json") if result.usage else None,
        "turns": len(turns),
        "kinds": {k: sum(t["k"] == k for t in turns) for k in dict.fromkeys(t["k"] for t in turns)},
        "chunks": [{"first": c[0]["n"], "n": len(c), "chars": sum(len(t["x"]) for t in c)} for c in chunks],
        # tokens so far (as the transcript reported them) at each submission's budget clock, and at the run's end
        "tokens": [[s["budget_s"], s["tokens"]] for s in submissions if s["budget_s"] is not None and s["tokens"]]
        + (
            [[result.agent_seconds, result.usage.input_tokens + (result.usage.output_tokens or 0)]]
            if result.usage and result.usage.input_tokens is not None
            else []
        ),
        "submissions": submissions,
        "diffs": diffs,
        "stages": [s.model_dump(mode="json") for s in stages.stages] if stages else [],
        "verdicts": verdicts,
        "verdict_error": verdict_error,
    }
    page = PAGE.replace("{TITLE}", html.escape(run_id)).replace("{DATA}", _js(data))
    atomic_write_text(out / "index.html", page)
    old = final.with_name(f".{final.name}.{os.getpid()}.old")
    if final.exists():
        final.rename(old)
    out.rename(final)
    shutil.rmtree(old, ignore_errors=True)
    return final / "index.html"


PAGE = (Path(__file__).with_name("viewer.html")).read_text()
