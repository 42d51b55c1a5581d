"""The cell tables of `a2rl aggregate` (reporting/aggregate.py): the long table, the feedback/final table, Table 2
(`--layout paper`), improvement by mode and pass@k. Each Table carries its display rows (simple, github, latex,
the HTML report) and its tidy data (csv, json, parquet: one dict per row, numbers or None; columns in
docs/analyses.md "Tidy exports"), computed once: the display strings are formatted from the numbers."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from a2rl.reporting.sweeps import (
    CELL,
    WITHIN_NOISE,
    Key,
    Run,
    Sweeps,
    expected_best_of,
    mean_sem,
    submitted_scores,
)

HEADERS = [
    "task",
    "agent",
    "driver",
    "mode",
    "model",
    "protocol",
    "base model",
    "best (mean ± SEM)",
    "improvement",
    "submissions",
    "runs ok",
    "runs failed",
]
BASE_ROW = "base model"  # Table 2's first row: the untouched model's score, never to be read as the control agent
Row = dict[str, object]  # one tidy row: column -> number, string, bool or None


@dataclass
class Table:
    title: str
    headers: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)
    keys: dict[tuple[int, int], Key] = field(default_factory=dict)  # (row, column): the cell whose runs it shows
    name: str = ""  # the tidy table's name: its key in JSON, its file's stem under --out (tables may share one)
    data: list[Row] = field(default_factory=list)  # the tidy rows


def stats(xs: list[float], name: str = "") -> Row:
    """{name_mean, name_sem, name_n} of `xs`: None where there is no value (sem: fewer than two)."""
    p = f"{name}_" if name else ""
    m, s = mean_sem(xs) if xs else (None, None)
    return {f"{p}mean": m, f"{p}sem": s if len(xs) > 1 else None, f"{p}n": len(xs)}


def cell(key: Key) -> Row:
    return dict(zip(CELL, key))


def _f(v: float | None, signed: bool = False) -> str:
    return "—" if v is None else (f"{v:+.2f}" if signed else f"{v:.2f}")


def _ms(st: Row, expected: int, signed: bool = False, name: str = "") -> str:
    """mean ± SEM of a stats() row, with n when fewer than `expected` values are there."""
    p = f"{name}_" if name else ""
    n = st[f"{p}n"]
    if not n:
        return "—"
    return f"{_f(st[f'{p}mean'], signed)} ± {st[f'{p}sem'] or 0.0:.2f}" + (f" (n={n})" if n < expected else "")


def _cell_keys(sw: Sweeps) -> list[Key]:
    models, tasks = {m: i for i, m in enumerate(sw.models())}, {t: i for i, t in enumerate(sw.tasks())}
    return sorted(sw.cells, key=lambda k: (models[k[0]], tasks[k[1]]))


def cell_data(sw: Sweeps, key: Key) -> Row:
    """The long table's numbers of one cell."""
    model, task, _, _, _, protocol = key
    runs = sw.cells[key]
    base = sw.baselines[task, model, protocol]
    results = [r.result for r in runs if r.result is not None]
    completed = [r for r in runs if r.completed]
    scores = [r.score for r in completed]
    scored = bool(completed) and any(r.result.best is not None for r in completed) and None not in scores
    st = stats(scores if scored else [])
    b = runs[0].base_score
    impr = st["mean"] - b if scored and b is not None else None  # else pending or failed: no improvement to tell
    return cell(key) | {
        "baseline_status": "pending" if base is None else base.status,
        "baseline_error": base.error if base is not None and base.status == "failed" else None,
        "baseline": b,
        **st,
        "improvement": impr,
        "within_noise": None if impr is None else sw.within_noise(task, model, protocol, impr),
        "submissions": sum(r.submissions for r in results),
        "valid": sum(r.valid_submissions for r in results),
        "runs": len(runs),
        "runs_ok": len(completed),
        "runs_failed": len(results) - len(completed),
        "runs_unfinished": len(runs) - len(results),
    }


def long_table(sw: Sweeps) -> Table:
    data = [cell_data(sw, key) for key in sw.cells]
    out = []
    for d in data:
        base_txt = {"pending": "pending", "failed": f"FAILED: {d['baseline_error']}"}.get(
            d["baseline_status"], _f(d["baseline"])
        )
        best_txt = "—" if d["mean"] is None else f"{d['mean']:.2f} ± {d['sem'] or 0.0:.2f}"
        impr_txt = (
            "—"
            if d["improvement"] is None
            else f"{d['improvement']:+.2f}" + (WITHIN_NOISE if d["within_noise"] else "")
        )
        unfinished = d["runs_unfinished"]
        ok_txt = str(d["runs_ok"]) + (f" (+{unfinished} unfinished)" if unfinished else "")
        out.append(
            [d[c] for c in ("task", "agent", "driver", "mode", "model", "protocol")]
            + [base_txt, best_txt, impr_txt, f"{d['submissions']} ({d['valid']} valid)", ok_txt, str(d["runs_failed"])]
        )
    return Table("results", HEADERS, out, name="cells", data=data)


def _split_keys(sw: Sweeps) -> list[Key]:
    return [k for k in _cell_keys(sw) if any(r.split for r in sw.cells[k])]


def _items(sw: Sweeps, keys: list[Key]) -> list[str]:
    """Per task, the items behind its feedback-part and final-part scores."""
    sizes: dict[str, tuple[int | None, int | None]] = {}
    for key in keys:
        for r in sw.cells[key]:
            if r.split and r.result.final_n is not None:
                sizes[key[1]] = (r.result.feedback_n, r.result.final_n)
    return [f"{t}: feedback part {fb} items, final part {fi} items" for t, (fb, fi) in sizes.items()]


SPLIT_NOTE = (
    "feedback: split: best = the best feedback-part score (the paper's number; the agent was answered on those "
    "items); final = the final-part score of the submission grader.final selected, scored once after the run; "
    "gap = best − final"
)


def final_data(key: Key, runs: list[Run]) -> Row:
    """The feedback/final numbers of one cell scored under `feedback: split`."""
    return (
        cell(key)
        | stats([r.score for r in runs if r.score is not None], "best")
        | stats([r.final for r in runs if r.final is not None], "final")
        | {"baseline_final": runs[0].base_final}
        | stats(
            [f - r.base_final for r in runs if (f := r.final) is not None and r.base_final is not None],
            "final_improvement",
        )
        | stats([r.selection_gap for r in runs if r.selection_gap is not None], "selection_gap")
        | {"runs": len(runs)}
    )


def final_table(sw: Sweeps) -> Table | None:
    """The cells scored under `feedback: split`: the paper's number beside the clean one, with the items behind
    each and the selection gap; None when no cell was."""
    keys = _split_keys(sw)
    if not keys:
        return None
    data = [final_data(key, sw.cells[key]) for key in keys]
    rows = [
        list(key)
        + [
            _ms(d, d["runs"], name="best"),
            _ms(d, d["runs"], name="final"),
            _f(d["baseline_final"]),
            _ms(d, d["runs"], signed=True, name="final_improvement"),
            _ms(d, d["runs"], signed=True, name="selection_gap"),
        ]
        for key, d in zip(keys, data)
    ]
    headers = CELL + ["best feedback", "final", "base model final", "final improvement", "selection gap"]
    return Table("feedback and final parts", headers, rows, [SPLIT_NOTE, *_items(sw, keys)], name="final", data=data)


def final_paper_tables(sw: Sweeps) -> list[Table]:
    """`--layout paper`'s clean block: per (model, protocol) with cells under `feedback: split`, the baseline's
    final-part score then one row per stack + driver; cells are the final-part score and the selection gap."""
    keys = _split_keys(sw)
    out = []
    for model, protocol in sw.blocks():
        mine = [k for k in keys if (k[0], k[5]) == (model, protocol)]
        if not mine:
            continue
        tasks = list(dict.fromkeys(k[1] for k in mine))
        base_row = [BASE_ROW] + [_f(sw.cells[next(k for k in mine if k[1] == t)][0].base_final) for t in tasks]
        rows: dict[str, list[str]] = {}
        data = []
        for key in mine:
            row = rows.setdefault(sw.label(key), [sw.label(key)] + ["—"] * len(tasks))
            d = final_data(key, sw.cells[key])
            data.append(d)
            text = _ms(d, d["runs"], name="final")
            if d["selection_gap_n"]:
                text += f" (gap {d['selection_gap_mean']:+.2f})"
            row[1 + tasks.index(key[1])] = text
        out.append(
            Table(
                f"Table 2, final part: {model}" + (f" (protocol {protocol})" if len(sw.blocks()) > 1 else ""),
                ["stack / driver", *tasks],
                [base_row, *rows.values()],
                [
                    "cells: final-part score of each run's selected submission, mean ± SEM over seeds; gap: best "
                    "feedback-part score − final, mean over seeds",
                    *_items(sw, mine),
                ],
                name="paper_final",
                data=data,
            )
        )
    return out


def paper_data(sw: Sweeps, key: Key) -> Row:
    """Table 2's numbers of one cell: the best score over seeds (none where no run made a valid submission)."""
    runs = sw.cells[key]
    st = stats(submitted_scores(runs))
    base = runs[0].base_score
    impr = st["mean"] - base if st["n"] and base is not None else None
    return (
        cell(key)
        | {"baseline": base}
        | st
        | {
            "runs": len(runs),
            "improvement": impr,
            "within_noise": None if impr is None else sw.within_noise(key[1], key[0], key[5], impr),
        }
    )


def paper_tables(sw: Sweeps) -> list[Table]:
    """Table 2: per base model (and evaluation protocol), the baseline row then one row per stack + driver; cells
    are the best score."""
    out = []
    blocks = sw.blocks()
    for model, protocol in blocks:
        tasks = sw.tasks(model, protocol)
        base_row = [BASE_ROW]
        for task in tasks:
            base = sw.baselines[task, model, protocol]
            base_row.append("pending" if base is None else "FAILED" if base.status == "failed" else _f(base.score))
        rows: dict[str, list[str]] = {}
        keys: dict[tuple[str, int], Key] = {}
        data = []
        for key in _cell_keys(sw):
            if (key[0], key[5]) != (model, protocol):
                continue
            row = rows.setdefault(sw.label(key), [sw.label(key)] + ["—"] * len(tasks))
            d = paper_data(sw, key)
            data.append(d)
            row[1 + tasks.index(key[1])] = _ms(d, d["runs"]) + (WITHIN_NOISE if d["within_noise"] else "")
            keys[sw.label(key), 1 + tasks.index(key[1])] = key
        title = f"Table 2: {model}" + (f" (protocol {protocol})" if len({p for _, p in blocks}) > 1 else "")
        out.append(
            Table(
                title,
                ["stack / driver", *tasks],
                [base_row, *rows.values()],
                [
                    "cells: best score, mean ± SEM over seeds; (n=…) where seeds are missing or failed; — where no "
                    "run made a valid submission"
                ],
                {(1 + list(rows).index(label), col): key for (label, col), key in keys.items()},
                name="paper",
                data=data,
            )
        )
    return out


def _by_mode(
    sw: Sweeps,
) -> tuple[list[tuple[str, str, str]], list[str], dict[tuple[str, str, str, str], list[float]]]:
    """Improvements of every run with one, by (mode, stack, driver, task) over base models: stacks are compared
    within a mode, never averaged together (the reference agent and a control that submits nothing make a
    mean that means nothing)."""
    by: dict[tuple[str, str, str, str], list[float]] = defaultdict(list)
    rows: list[tuple[str, str, str]] = []
    for mode in sw.modes():
        for (_, task, agent, driver, m, _), runs in sw.cells.items():
            if m != mode:
                continue
            row = (mode, agent, driver)
            rows += [row] if row not in rows else []
            base = runs[0].base_score
            by[(*row, task)] += [s - base for s in submitted_scores(runs) if base is not None]
    return rows, sw.tasks(), by


def mode_table(sw: Sweeps) -> Table:
    rows, tasks, by = _by_mode(sw)
    data = [
        {"mode": mode, "agent": agent, "driver": driver, "task": t} | stats(by[mode, agent, driver, t], "improvement")
        for mode, agent, driver in rows
        for t in tasks
    ]
    out = [
        [mode, f"{agent} / {driver}"]
        + [
            _ms(d, 0, signed=True, name="improvement") + (f" (n={n})" if (n := d["improvement_n"]) else "")
            for d in data[i * len(tasks) : (i + 1) * len(tasks)]
        ]
        for i, (mode, agent, driver) in enumerate(rows)
    ]
    return Table(
        "improvement by mode",
        ["mode", "stack / driver", *tasks],
        out,
        ["cells: mean ± SEM over runs (n); — where no run of the stack made a valid submission"],
        name="by_mode",
        data=data,
    )


def heatmap(sw: Sweeps) -> tuple[list[str], list[str], list[list[float | None]]]:
    """The numbers of mode_table: (rows "mode · stack / driver", tasks, mean improvement or None)."""
    rows, tasks, by = _by_mode(sw)
    grid = [[mean_sem(by[m, a, d, t])[0] if by[m, a, d, t] else None for t in tasks] for m, a, d in rows]
    return [f"{m} · {a} / {d}" for m, a, d in rows], tasks, grid


def pass_at_table(sw: Sweeps, ks: list[int]) -> Table:
    rows, data = [], []
    for key in _cell_keys(sw):
        runs = sw.cells[key] if submitted_scores(sw.cells[key]) else []  # none submitted: no improvement to tell
        xs = [r.improvement for r in runs if r.improvement is not None]
        data.append(
            cell(key) | {"n": len(xs)} | {f"pass_at_{k}": expected_best_of(xs, k) if k <= len(xs) else None for k in ks}
        )
        rows.append(list(key) + [str(len(xs))] + [_f(data[-1][f"pass_at_{k}"], True) for k in ks])
    return Table(
        "pass@k: expected best improvement over k runs",
        CELL + ["n"] + [f"pass@{k}" for k in ks],
        rows,
        ["— where the cell has fewer than k runs with a score, or no run of it made a valid submission"],
        name="pass_at",
        data=data,
    )
