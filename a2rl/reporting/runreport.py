"""Per-run report, `runs/<id>/report/` in the sweep directory (outside the agent's reach), built only from what
the sweep recorded (result, ledger, code snapshots, transcript), so it can be rebuilt at any time:

    metrics.json      RunMetrics: the paper's process metrics, usage, training type, failure type, leaks
    summary.jsonl     one SubmissionRow per submission, in order
    summary.md        the same for people: one section per submission with the files its code changed
    trajectory.png    score per submission, best so far, the base model's score (none for a run without a
                      submission: nothing to plot)
    viewer/           the trajectory viewer (reporting/viewer.py)

`a2rl runreport SWEEP_DIR [RUN_ID ...]` rebuilds them (every run with a result by default).
"""

from __future__ import annotations

import logging
from pathlib import Path

from a2rl.recording.snapshots import snapshot_dir
from a2rl.records import atomic_write_text
from a2rl.reporting.metrics import RunMetrics, SubmissionRow, build
from a2rl.reporting.viewer import write_viewer
from a2rl.store.results import RunResult
from a2rl.store.sweepdir import SweepDir


def _fmt(v: float | None, signed: bool = False) -> str:
    return "—" if v is None else (f"{v:+.2f}" if signed else f"{v:.2f}")


log = logging.getLogger("a2rl.runreport")


def _source(source: str | None, route: str | None = None) -> str:
    """Where a train type came from, when the agent said it itself (its stage log), not its code."""
    if source != "self-reported":
        return ""
    return f" (self-reported by the agent{f', route {route}' if route else ''})"


def _where(e) -> str:
    """An Evidence as a place: turn N, snapshot S file:line, and its quote."""
    parts = [f"turn {e.turn}" if e.turn is not None else ""]
    if e.path:
        parts.append(f"snapshot {e.seq} {e.path}" + (f":{e.line}" if e.line is not None else ""))
    quote = f" «{e.quote[:120]}»" if e.quote else ""
    return ", ".join(p for p in parts if p) + quote


def markdown(m: RunMetrics, rows: list[SubmissionRow], snapshots: Path) -> str:
    out = [
        f"# {m.run_id}",
        "",
        f"{m.status}; baseline {_fmt(m.baseline)}, best {_fmt(m.best)} ({_fmt(m.improvement, True)}); "
        f"{m.submissions} submission(s), training {m.train_type}{_source(m.train_type_source, m.route)}; "
        f"failure: {m.failure_type or 'none'}{f' ({m.failure_source})' if m.failure_source else ''}",
        "",
    ]
    if m.feedback == "split":
        out += [
            f"feedback: split: baseline and best are on the feedback part ({m.feedback_n} items), the agent's "
            f"answers; final part ({m.final_n} items), scored once after the run: "
            + (
                f"{_fmt(m.final)} for {m.final_submission} ({m.final_selected_by}), baseline {_fmt(m.baseline_final)} "
                f"({_fmt(m.final_improvement, True)}); selection gap (best − final) {_fmt(m.selection_gap, True)}"
                if m.final_submission
                else "not scored (yet)"
            ),
            "",
        ]
    if m.leaks:
        out += [f"**LEAK**: held-out data found: {'; '.join(m.leaks)}", ""]
    if m.foreign_submissions:
        out += [
            f"**FOREIGN MODEL**: submission(s) {', '.join(map(str, m.foreign_submissions))} not plausibly trained "
            f"from the base model (the grader's lineage check)",
            "",
        ]
    if m.inspector_verdicts:
        out += [f"## Inspector: {m.inspector_flag} (an LLM judge's verdicts; they do not change a score)", ""]
        for v in m.inspector_verdicts:
            where = "; ".join(_where(e) for e in v.evidence)
            out.append(
                f"- {v.question}: {v.verdict}"
                + (
                    f" (overridden by {v.override.by}: {v.override.reason}; the judge said {v.judge_verdict})"
                    if v.override
                    else ""
                )
                + (f"; evidence: {where}" if where else "")
                + (f". {v.explanation}" if v.explanation else "")
            )
        out.append("")
    out += ["| metric | value |", "|---|---|"]
    out += [
        f"| {k} | {v} |"
        for k, v in m.model_dump(exclude={"schema_version", "score_trajectory", "inspector_verdicts"}).items()
    ]
    for r in rows:
        out += [
            "",
            f"## Submission {r.iteration} ({r.submission_id}) at {r.at_s:.0f} s",
            "",
            f"- score: {_fmt(r.score)}"
            + (" (copy of the base model)" if r.copy_of_base else "")
            + (f" (invalid: {r.error})" if r.error else ""),
            f"- change vs previous valid: {_fmt(r.delta_prev, True)}; vs baseline: {_fmt(r.improvement, True)}",
            f"- training: {r.train_type}{_source(r.train_type_source)}; failure: {r.failure_type or 'none'}",
            f"- lineage: {r.lineage_reason or 'not compared'}",
        ]
        changed = (
            [f"+{p}" for p in r.files_added] + [f"~{p}" for p in r.files_modified] + [f"-{p}" for p in r.files_removed]
        )
        out.append(
            f"- files changed: {', '.join(changed) or 'none'} (diff: {snapshots / f'{r.iteration:03d}.diff'})"
            if r.snapshot_error is None
            else f"- **no code record**: {r.snapshot_error}"
        )
    return "\n".join(out) + "\n"


def plot(m: RunMetrics, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    if not m.score_trajectory:  # no submission (a control agent's run): nothing to plot
        path.unlink(missing_ok=True)
        return
    fig, ax = plt.subplots(figsize=(6, 3.5))
    xs = range(1, len(m.score_trajectory) + 1)
    pts = [(x, s) for x, s in zip(xs, m.score_trajectory) if s is not None]
    if pts:
        ax.plot(*zip(*pts), "o-", label="score")
        best, bx = [], []
        for x, s in pts:
            best.append(max(s, best[-1]) if best else s)
            bx.append(x)
        ax.step(bx, best, where="post", linestyle="--", label="best so far")
    bad = [x for x, s in zip(xs, m.score_trajectory) if s is None]
    if bad:
        ax.plot(bad, [m.baseline or 0.0] * len(bad), "rx", label="invalid")
    if m.baseline is not None:
        ax.axhline(m.baseline, color="gray", linewidth=1, label="base model")
    ax.set(xlabel="submission", ylabel="score", title=m.run_id)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # submissions are counted, never fractional
    ax.title.set_fontsize(9)
    ax.legend(fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=200)  # 1200 × 700 px: sharp on high-density screens
    plt.close(fig)
    tmp.replace(path)


def write_run_report(sweep: SweepDir, run_id: str, result: RunResult | None = None) -> Path:
    """The report of a run; `result` before it is written (the job reports first, so a result on disk always
    has its report), else read from the sweep directory."""
    result = result or RunResult.load_verified(sweep.result_path(run_id), sweep.key)
    metrics, rows = build(sweep, run_id, result)
    out = sweep.run_dir(run_id) / "report"
    metrics.dump(out / "metrics.json")
    atomic_write_text(
        out / "summary.jsonl",
        "".join(r.json_line() for r in rows),
    )
    atomic_write_text(out / "summary.md", markdown(metrics, rows, snapshot_dir(sweep.root, run_id)))
    plot(metrics, out / "trajectory.png")
    write_viewer(sweep, run_id, result)
    return out


def rebuild_run_report(sweep: SweepDir, run_id: str, result: RunResult) -> None:
    """write_run_report as the run's job and the grader's result hook (a2rl.store.results.ResultHook, passed by
    scheduling): a report is derived and can be rebuilt (`a2rl runreport`), so its failure is logged, never theirs."""
    try:
        write_run_report(sweep, run_id, result)
    except Exception:
        log.exception("run report for %s failed", run_id)
