"""The breakdown tables of `a2rl aggregate` (reporting/aggregate.py): scaling, routes, failures, usage,
submissions, the runs and the inspector's flags, and `tables()`, which picks the tables asked for. As in
reporting/tables.py, each Table carries display rows and tidy data (docs/analyses.md "Tidy exports")."""

from __future__ import annotations

from collections import Counter

from a2rl.reporting.sweeps import CELL, Key, Run, Sweeps, failure_cause, submitted_scores
from a2rl.reporting.tables import (
    Row,
    Table,
    _cell_keys,
    _f,
    _ms,
    cell,
    final_paper_tables,
    final_table,
    long_table,
    mode_table,
    paper_tables,
    pass_at_table,
    stats,
)

FRACTIONS = (0.25, 0.5, 0.75, 1.0)  # of the budget, for --scaling
TOKEN_POINTS = (10_000, 100_000, 1_000_000)
SUBMISSION_POINTS = (1, 3, 5)


def scaling_table(sw: Sweeps) -> Table:
    with_tokens = any(t is not None for r in sw.runs if r.completed for t in r.result.submitted_tokens)
    points = (
        [("budget", f) for f in FRACTIONS]
        + ([("tokens", t) for t in TOKEN_POINTS] if with_tokens else [])
        + [("submissions", k) for k in SUBMISSION_POINTS]
    )
    headers = [
        f"@{v:.0%} budget"
        if at == "budget"
        else f"@{v:,} tokens"
        if at == "tokens"
        else f"@{v} submission" + ("s" if v > 1 else "")
        for at, v in points
    ]
    rows, data = [], []
    for key in _cell_keys(sw):
        runs = sw.cells[key]
        # per run, its best at each point: the budget fractions (of its own budget), the token counts, the
        # submission counts
        at_points = [
            r.best_within("budget_s", [f * r.spec.budget_s for f in FRACTIONS])
            + (r.best_within("tokens", list(TOKEN_POINTS)) if with_tokens else [])
            + r.best_after(list(SUBMISSION_POINTS))
            for r in runs
        ]
        columns = zip(*at_points) if submitted_scores(runs) else [[] for _ in headers]
        mine = [
            cell(key) | {"at": at, "point": v} | stats([x for x in column if x is not None]) | {"runs": len(runs)}
            for (at, v), column in zip(points, columns)
        ]
        data += mine
        rows.append(list(key) + [_ms(d, len(runs)) for d in mine])
    return Table(
        "scaling: best score so far",
        CELL + headers,
        rows,
        [
            "a run without a valid submission by then scores its baseline; @k submissions: its first k graded"
            " ones (all, when it made fewer); — where no run of the cell made a valid submission"
        ],
        name="scaling",
        data=data,
    )


def routes_table(sw: Sweeps) -> Table:
    sw.with_metrics()
    rows, data = [], []
    for key in _cell_keys(sw):
        routes = Counter(
            (r.metrics.train_type if r.metrics else "?")
            for r in sw.cells[key]
            if r.completed and r.result.best is not None
        )
        rows.append(list(key) + [", ".join(f"{t}×{n}" for t, n in routes.most_common()) or "—"])
        data += [cell(key) | {"training": t, "runs": n} for t, n in routes.most_common()] or [
            cell(key) | {"training": None, "runs": 0}
        ]
    return Table(
        "routes of the best submissions",
        CELL + ["training (runs)"],
        rows,
        ["from each run's report (TRL classes in the code behind its best submission); ? = no report yet"],
        name="routes",
        data=data,
    )


def failures_table(sw: Sweeps) -> Table:
    sw.with_metrics()
    rows, data = [], []
    for key in _cell_keys(sw):
        causes = [failure_cause(r) for r in sw.cells[key]]
        types = ", ".join(f"{t}×{n}" for t, n in Counter(t for src, t in causes if src == "agent").most_common())
        d = cell(key) | {
            "infrastructure": sum(s == "infra" for s, _ in causes),
            "agent": sum(s == "agent" for s, _ in causes),
            "agent_failure_types": types or None,
        }
        data.append(d)
        rows.append(list(key) + [str(d["infrastructure"]), str(d["agent"]), types or "—"])
    return Table(
        "failures by cause",
        CELL + ["infrastructure", "agent", "agent failure types"],
        rows,
        [
            "infrastructure: set-up, supervision, baseline or grading did not complete; agent: the run ended "
            "without improving on its baseline"
        ],
        name="failures",
        data=data,
    )


def usage_table(sw: Sweeps) -> Table:
    rows, data = [], []
    for key in _cell_keys(sw):
        usages = [r.result.usage for r in sw.cells[key] if r.result is not None and r.result.usage is not None]
        tokens = [u.input_tokens + (u.output_tokens or 0) for u in usages if u.input_tokens is not None]
        costs = [u.cost_usd for u in usages if u.cost_usd is not None]
        d = cell(key) | {
            "tokens_per_run": sum(tokens) / len(tokens) if tokens else None,
            "tokens": sum(tokens) if tokens else None,
            "cost_per_run": sum(costs) / len(costs) if costs else None,
            "cost": sum(costs) if costs else None,
        }
        data.append(d)
        rows.append(
            list(key)
            + [
                f"{d['tokens_per_run']:,.0f}" if tokens else "—",
                f"{d['tokens']:,}" if tokens else "—",
                _f(d["cost_per_run"]),
                _f(d["cost"]),
            ]
        )
    return Table(
        "tokens and cost",
        CELL + ["tokens / run", "tokens", "cost $ / run", "cost $"],
        rows,
        ["from the agents' transcripts; — where the stack reports none"],
        name="usage",
        data=data,
    )


def submission_data(key: Key, run: Run) -> list[Row]:
    """One row per graded submission of `run`, in order: its score (None: invalid) and when it was made."""
    r = run.result
    if r is None:
        return []
    return [
        {"run_id": r.run_id, **cell(key), "seed": r.seed, "submission": i + 1, "score": s, "valid": s is not None}
        | {"budget_s": b, "tokens": t}
        for i, (s, b, t) in enumerate(zip(r.scores, r.submitted_budget_s, r.submitted_tokens))
    ]


def submissions_table(sw: Sweeps) -> Table:
    """Display: submissions per run over a cell's runs; tidy data: one row per graded submission."""
    rows = []
    for key in _cell_keys(sw):
        results = [r.result for r in sw.cells[key] if r.result is not None]
        subs = [float(r.submissions) for r in results]
        valid = sum(r.valid_submissions for r in results)
        rows.append(list(key) + [_ms(stats(subs), 0), f"{valid / sum(subs):.0%}" if sum(subs) else "—"])
    data = [d for key in _cell_keys(sw) for run in sw.cells[key] for d in submission_data(key, run)]
    return Table(
        "submissions per run", CELL + ["submissions (mean ± SEM)", "valid"], rows, name="submissions", data=data
    )


RUN_HEADERS = ["run", *CELL, "seed", "status", "score", "baseline", "improvement", "final", "submissions", "valid"]


def run_data(key: Key, run: Run) -> Row:
    """One run's numbers: its status (unfinished until its result is in), score, baseline, improvement, final-part
    score and selection gap, submissions, tokens and cost."""
    r = run.result
    usage = r.usage if r is not None else None
    return (
        {"run_id": run.spec.run_id}
        | cell(key)
        | {
            "seed": run.spec.seed,
            "status": "unfinished" if r is None else r.status,
            "score": run.score,
            "baseline": run.base_score,
            "improvement": run.improvement,
            "final": run.final,
            "selection_gap": run.selection_gap,
            "submissions": None if r is None else r.submissions,
            "valid": None if r is None else r.valid_submissions,
            "tokens": None
            if usage is None or usage.input_tokens is None
            else usage.input_tokens + (usage.output_tokens or 0),
            "cost": None if usage is None else usage.cost_usd,
            "failure_reason": None if r is None else r.failure_reason,
        }
    )


def runs_table(sw: Sweeps) -> Table:
    """One row per run (`--per-run`)."""
    data = [run_data(key, run) for key in _cell_keys(sw) for run in sw.cells[key]]
    rows = [
        [d["run_id"], *(d[c] for c in CELL), str(d["seed"]), d["status"]]
        + [_f(d["score"]), _f(d["baseline"]), _f(d["improvement"], True), _f(d["final"])]
        + ["—" if d["submissions"] is None else str(d["submissions"]), "—" if d["valid"] is None else str(d["valid"])]
        for d in data
    ]
    return Table("runs", RUN_HEADERS, rows, name="runs", data=data)


def flags_table(sw: Sweeps) -> Table:
    """The inspector's verdicts per run (a2rl inspect): the run's flag (its worst verdict) and each question's,
    a researcher's override marked; runs not inspected are counted in a note. Scores are not touched."""
    sw.with_metrics()
    inspected = [r for r in sw.runs if r.metrics is not None and r.metrics.inspector_verdicts]
    questions = list(dict.fromkeys(v.question for r in inspected for v in r.metrics.inspector_verdicts))
    rows, data = [], []
    for r in inspected:
        by_q = {v.question: v for v in r.metrics.inspector_verdicts}
        verdicts = [by_q.get(q) for q in questions]
        cells = ["—" if v is None else v.verdict + (" (overridden)" if v.override else "") for v in verdicts]
        rows.append([r.spec.run_id, r.metrics.inspector_flag or "—", *cells])
        d = {"run_id": r.spec.run_id, "flag": r.metrics.inspector_flag}
        for q, v in zip(questions, verdicts):
            d |= {q: None if v is None else v.verdict, f"{q}_overridden": None if v is None else v.override is not None}
        data.append(d)
    notes = ["an LLM judge's verdicts with their evidence in each run's report; unknown: the judge gave none"]
    if missing := len(sw.runs) - len(inspected):
        notes.append(f"{missing} run(s) not inspected (a2rl inspect)")
    return Table("inspector flags", ["run", "flag", *questions], rows, notes, name="flags", data=data)


def tables(
    sw: Sweeps,
    *,
    layout: str = "long",
    by: str | None = None,
    pass_at: list[int] | None = None,
    scaling: bool = False,
    routes: bool = False,
    failures: bool = False,
    usage: bool = False,
    submissions: bool = False,
    per_run: bool = False,
    flags: bool = False,
) -> list[Table]:
    """The tables asked for, in a fixed order; the long table when nothing else is."""
    out = paper_tables(sw) + final_paper_tables(sw) if layout == "paper" else []
    out += [mode_table(sw)] if by == "mode" else []
    out += [pass_at_table(sw, pass_at)] if pass_at else []
    out += [scaling_table(sw)] if scaling else []
    out += [routes_table(sw)] if routes else []
    out += [failures_table(sw)] if failures else []
    out += [usage_table(sw)] if usage else []
    out += [submissions_table(sw)] if submissions else []
    out += [runs_table(sw)] if per_run else []
    out += [flags_table(sw)] if flags else []
    return out or main_tables(sw)


def main_tables(sw: Sweeps) -> list[Table]:
    """The long table, and the feedback/final table where cells were scored under `feedback: split`."""
    return [long_table(sw)] + [t for t in [final_table(sw)] if t is not None]
