"""The results table (`python -m a2rl.aggregate SWEEP_DIR`): one row per task × agent × driver × prompt
mode × model × protocol over seeds (runs in different modes or scored under different protocols are different
experiments: never averaged together).

best is the mean ± SEM over seeds of each run's best score, where a run with no valid submission keeps the
base model (its baseline), as in the paper; improvement is best − baseline. Results and baselines that do not verify against the sweep's key are left out,
and each is named in `problems` (the command prints them to stderr).
"""

from __future__ import annotations

import csv
import io
import math
from collections import defaultdict

from tabulate import tabulate

from a2rl.store.baselines import load_baseline
from a2rl.store.results import RunResult, load_result
from a2rl.store.sweepdir import SweepDir

HEADERS = ["task", "agent", "driver", "mode", "model", "protocol", "baseline", "best (mean ± SEM)", "improvement", "submissions",
           "runs ok", "runs failed"]


def mean_sem(xs: list[float]) -> tuple[float, float]:
    m = sum(xs) / len(xs)
    if len(xs) < 2:
        return m, 0.0
    var = sum((x - m) ** 2 for x in xs) / (len(xs) - 1)
    return m, math.sqrt(var / len(xs))


def rows(sweep: SweepDir, problems: list[str]) -> list[list[str]]:
    groups: dict[tuple, list[RunResult]] = defaultdict(list)
    order: list[tuple] = []
    for run in sweep.runs():
        key = (run.task, run.agent.key, run.driver, run.mode, run.model.name, run.protocol)
        if key not in groups:
            order.append(key)
        result = load_result(sweep, run.run_id, problems)
        groups[key].append(result)
    out = []
    for key in order:
        task, agent, driver, mode, model, protocol = key
        results = [r for r in groups[key] if r is not None]
        unfinished = len(groups[key]) - len(results)
        base = load_baseline(sweep, task, model, protocol, problems)
        if base is None:
            base_txt, base_score = "pending", None
        elif base.status == "failed":
            base_txt, base_score = f"FAILED: {base.error}", None
        else:
            base_txt, base_score = f"{base.score:.2f}", base.score
        completed = [r for r in results if r.status != "failed"]
        best_txt = impr_txt = "—"
        effective = [r.best if r.best is not None else base_score for r in completed]
        if completed and any(r.best is not None for r in completed) and None not in effective:
            m, s = mean_sem(effective)
            best_txt = f"{m:.2f} ± {s:.2f}"
            impr_txt = f"{m - base_score:+.2f}"
        subs = sum(r.submissions for r in results)
        valid = sum(r.valid_submissions for r in results)
        ok_txt = str(len(completed)) + (f" (+{unfinished} unfinished)" if unfinished else "")
        out.append([task, agent, driver, mode, model, protocol, base_txt, best_txt, impr_txt, f"{subs} ({valid} valid)",
                    ok_txt, str(len(results) - len(completed))])
    return out


def render(sweep: SweepDir, fmt: str, problems: list[str]) -> str:
    table = rows(sweep, problems)
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(HEADERS)
        w.writerows(table)
        return buf.getvalue().rstrip("\n") + untrusted_note(sweep)
    return tabulate(table, headers=HEADERS, tablefmt=fmt, disable_numparse=True) + untrusted_note(sweep)


def untrusted_note(sweep: SweepDir) -> str:
    """Agents run without a sandbox could read held-out data and other runs: say so under every table."""
    return "\n# UNTRUSTED: isolation: none (agents ran unisolated; scores may use held-out data)" \
        if sweep.spec.isolation == "none" else ""
