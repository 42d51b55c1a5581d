"""The sweep report, `a2rl report SWEEP_DIR... [--out DIR]` (default: the first sweep's report/): one static
index.html with the paper's tables (reporting/aggregate.py), a plot per cell of every run's score against its
budget clock, the mode × task heatmap, and a row per run: its status, score, failure cause and links to its own
report (runs/<id>/report/) and agent log. Plain files with relative links and no scripts, styles or fonts from
elsewhere: it opens from a shared file system or after `rsync` of the sweep directories, without a server.
"""

from __future__ import annotations

import html
import logging
import multiprocessing
import os
import re
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from tabulate import tabulate

from a2rl.records import atomic_write_text
from a2rl.reporting.aggregate import Key, Run, Sweeps, Table, failure_cause, foreign_note, heatmap, tables
from a2rl.reporting.viewer import viewer_path, write_viewer
from a2rl.store.verdicts import inspection_path, overrides_path

STYLE = """body{font-family:sans-serif;margin:2em;max-width:1400px}table{border-collapse:collapse;margin:.5em 0}
td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}td:first-child,th:first-child{text-align:left}
.note{color:#555;font-size:90%}.plots img{width:480px;margin:4px;border:1px solid #eee}
td a.run{font-size:80%;margin-left:.3em}
.warn{background:#fdd;padding:.5em}"""
PASS_AT = [1, 3, 5]
# a 5 × 3 in figure at DPI: 720 × 432 px (twice the former 360 × 216), shown 480 px wide (sharp on a 1.5× screen);
# FONT points then read at about 15 CSS px, the page's own text size. Pixels cost the report's time: 10,000 runs'
# plots are most of it (tools/bench/aggregate.py)
DPI = 144
FONT = 11
LEGEND_RUNS = 6  # a legend of more seeds costs half the plot's time and tells nothing
CELLS_PER_WORKER = 50  # below this many plots a worker process costs more than it saves


def _table(t: Table, sw: Sweeps | None = None, out: Path | None = None) -> str:
    """A table; with `sw` and `out`, a cell that shows runs (Table 2) links to each run's viewer (by seed)."""
    body = tabulate(t.rows, headers=t.headers, tablefmt="html", disable_numparse=True)  # escapes the cells
    if sw is not None and t.keys:
        cells = iter(re.finditer(r"<td>(.*?)</td>", body))  # in row order, as tabulate writes them
        linked, pos = [], 0
        for i, row in enumerate(t.rows):
            for j in range(len(row)):
                m = next(cells)
                if (key := t.keys.get((i, j))) is None:
                    continue
                runs = "".join(
                    _link(out, viewer_path(r.sweep, r.spec.run_id), f"s{r.spec.seed}", "run") for r in sw.cells[key]
                )
                linked += [body[pos : m.end(1)], runs]
                pos = m.end(1)
        body = "".join(linked) + body[pos:]
    notes = "".join(f'<p class="note">{html.escape(n)}</p>' for n in t.notes)
    return f"<h3>{html.escape(t.title)}</h3>\n{body}\n{notes}"


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


# what a cell's plot needs, picklable for the worker processes: title (the cell, its finished runs and how many of
# them have a score to draw), budget, baseline, and per run with a budget-timed submission its seed and
# (budget s, score) points
CellPlot = tuple[str, float, "float | None", list[tuple[int, list[tuple[float, float]]]]]


def cell_data(sw: Sweeps, key: Key) -> CellPlot:
    runs = sw.cells[key]
    series = [(r.spec.seed, [(x, s) for x, s in r.scored("budget_s") if x is not None]) for r in runs if r.result]
    drawn = [(seed, pts) for seed, pts in series if pts]
    scored = f", {len(drawn)} with a scored submission" if len(drawn) < len(series) else ""
    title = f"{' / '.join(key)}\n({len(series)} runs{scored})"  # two lines: readable type fits the plot's width
    return title, runs[0].spec.budget_s, runs[0].base_score, drawn


def _steps(base: float | None, pts: list[tuple[float, float]], budget: float) -> list[tuple[float, float]]:
    """The vertices of a run's best score so far, from the base model's score at 0 to the budget's end."""
    xs, best = ([0.0], [base]) if base is not None else ([], [])
    for x, s in pts:
        xs.append(x)
        best.append(max(s, best[-1]) if best else s)
    xs.append(budget)
    out = []
    for x0, x1, y in zip(xs, xs[1:], best):
        out += [(x0, y), (x1, y)]
    return out


def plot_cells(jobs: list[tuple[CellPlot, str]]) -> None:
    """Every run of each cell: its scores (dots) and best so far (steps, from the base model's score at 0)
    against the budget clock, and the baseline. Hundreds of cells share one figure, and most of a plot's time
    is text: the frame and x axis (the same for every cell of one budget) are drawn once per budget and
    restored, only each cell's own artists are drawn over them; a cell's dots and steps are one collection
    each, not two lines per run."""
    plt = _plt()
    from matplotlib.collections import PolyCollection
    from matplotlib.image import imsave
    from matplotlib.legend import Legend
    from matplotlib.lines import Line2D

    fig, ax = plt.subplots(figsize=(5, 3), dpi=DPI)
    fig.subplots_adjust(left=0.17, right=0.94, bottom=0.17, top=0.85)  # room for tick labels like −0.04, 1800
    ax.set_xlabel("budget clock (s)", fontsize=FONT)
    ax.set_ylabel("score", fontsize=FONT)
    ax.tick_params(labelsize=FONT - 1)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    # open polygons, not a LineCollection: a legend placed "best" avoids their paths
    steps = PolyCollection([], facecolors="none", linewidths=2)
    ax.add_collection(steps, autolim=False)
    dots = ax.scatter([], [], s=16, linewidths=1)  # as line markers "o" of size 4
    base_line = ax.axhline(0, color="gray", linewidth=1, linestyle="--")
    title = ax.set_title("", fontsize=FONT - 2)
    per_cell = [steps, dots, base_line, *ax.spines.values(), ax.yaxis, title]
    for artist in per_cell:
        artist.set_animated(True)  # left out of the background
    canvas, backgrounds = fig.canvas, {}
    for (name, budget, base, series), path in jobs:
        ax.set_xlim(0, budget)
        if budget not in backgrounds:
            canvas.draw()
            backgrounds[budget] = canvas.copy_from_bbox(fig.bbox)
        run_colors = [colors[i % len(colors)] for i in range(len(series))]
        steps.set_verts([_steps(base, pts, budget) for _, pts in series], closed=False)
        steps.set_edgecolor(run_colors)
        dots.set_offsets([p for _, pts in series for p in pts] or [(float("nan"), float("nan"))])
        dots.set_color([c for c, (_, pts) in zip(run_colors, series) for _ in pts] or ["none"])
        ys = [s for _, pts in series for _, s in pts] + ([base] if base is not None else [])
        if ys:  # as autoscaling would: the data's span (widened when a single value), plus the margins
            lo, hi = ax.yaxis.get_major_locator().nonsingular(min(ys), max(ys))
            pad = (hi - lo) * ax.margins()[1]
            ax.set_ylim(lo - pad, hi + pad)
        else:
            ax.set_ylim(0, 1)
        # nan: no line, and nothing for the legend to avoid
        base_line.set_ydata([float("nan") if base is None else base] * 2)
        title.set_text(name)
        canvas.restore_region(backgrounds[budget])
        renderer = canvas.get_renderer()
        for artist in per_cell:
            artist.draw(renderer)
        handles = (
            [Line2D([], [], color=c, linewidth=2, label=f"s{seed}") for c, (seed, _) in zip(run_colors, series)]
            if len(series) <= LEGEND_RUNS
            else []
        )
        if base is not None:
            handles.append(Line2D([], [], color="gray", linewidth=1, linestyle="--", label="base model"))
        if handles:
            Legend(ax, handles, [h.get_label() for h in handles], fontsize=FONT - 2, ncol=2).draw(renderer)
        imsave(path, canvas.buffer_rgba(), format="png", dpi=DPI)
    plt.close(fig)


def heatmap_plot(sw: Sweeps, path: Path) -> None:
    plt = _plt()
    rows, tasks, grid = heatmap(sw)
    fig, ax = plt.subplots(figsize=(max(5.0, 4 + 1.2 * len(tasks)), 1.5 + 0.5 * len(rows)))
    vals = [[v if v is not None else float("nan") for v in row] for row in grid]
    span = max([abs(v) for row in grid for v in row if v is not None], default=1.0) or 1.0
    im = ax.imshow(vals, cmap="RdYlGn", aspect="auto", vmin=-span, vmax=span)  # 0 (no change) is the middle
    ax.set_xticks(range(len(tasks)), tasks, rotation=30, ha="right")
    ax.set_yticks(range(len(rows)), rows)
    for i, row in enumerate(grid):
        for j, v in enumerate(row):
            ax.text(j, i, "—" if v is None else f"{v:+.1f}", ha="center", va="center", fontsize=10)
    # a title, not the colorbar's label: with one row the figure is too short for it
    ax.set_title("mean improvement over the base model", fontsize=10)
    fig.colorbar(im, ax=ax)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _link(out: Path, target: Path, text: str, cls: str = "") -> str:
    if not target.exists():
        return ""
    attr = f' class="{cls}"' if cls else ""
    return f'<a{attr} href="{html.escape(os.path.relpath(target, out))}">{html.escape(text)}</a>'


log = logging.getLogger("a2rl.report")


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def refresh_viewers(sw: Sweeps) -> None:
    """Build each finished run's viewer where it is missing or older than what it shows (a run report rebuilt,
    an inspection or override since): the run's job writes it with the run report, this catches the rest. A
    viewer that cannot be built is logged and left out, never the report's failure."""
    for run in sw.runs:
        if run.result is None:
            continue
        page = viewer_path(run.sweep, run.spec.run_id)
        inputs = [
            run.dir / "result.json",
            run.dir / "report" / "metrics.json",
            inspection_path(run.dir),
            overrides_path(run.dir),
        ]
        if _mtime(page) >= max(map(_mtime, inputs)):
            continue
        try:
            write_viewer(run.sweep, run.spec.run_id, run.result)
        except Exception:
            log.exception("the viewer of %s failed", run.spec.run_id)


def write_report(sw: Sweeps, out: Path) -> Path:
    """index.html and its plots under `out`; returns the index's path. The cells' plots, most of the time, are
    drawn in worker processes while this one writes the rest of the page."""
    refresh_viewers(sw)
    plots = out / "plots"
    plots.mkdir(parents=True, exist_ok=True)
    _plt()  # before the workers fork: they inherit matplotlib rather than import it again
    cells = [(cell_data(sw, key), str(plots / f"cell-{i:04d}.png")) for i, key in enumerate(sw.cells)]
    jobs = [(cell, path) for cell, path in cells if cell[3]]  # a cell no run of which scored has nothing to draw
    workers = min(os.cpu_count() or 1, -(-len(jobs) // CELLS_PER_WORKER))
    if workers > 1:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
            plotted = pool.map(plot_cells, [jobs[i::workers] for i in range(workers)])
            page = _page(sw, out, cells)
            list(plotted)
    else:
        page = _page(sw, out, cells)
        plot_cells(jobs)
    index = out / "index.html"
    atomic_write_text(index, page)
    return index


def _failure(run: Run) -> str:
    """Why the run did not improve on its baseline, by cause (as the failures table counts it); "" when it did."""
    source, kind = failure_cause(run)
    if source == "infra":
        return f"infrastructure: {run.result.failure_reason or kind}"
    return f"agent: {kind}" if source == "agent" else ""


def _flag(run: Run) -> str:
    """The inspector's flag of a run, "not inspected" without a verdict; an override is marked."""
    m = run.metrics
    if m is None or not m.inspector_verdicts:
        return "not inspected"
    return m.inspector_flag + (" (overridden)" if any(v.override for v in m.inspector_verdicts) else "")


def _page(sw: Sweeps, out: Path, cells: list[tuple[CellPlot, str]]) -> str:
    """index.html's text (and the heatmap it shows), with the cells' plots at their paths (those with a run
    to draw)."""
    plots = out / "plots"
    parts = [f"<h1>a2rl report: {html.escape(', '.join(str(s.root) for s in sw.dirs))}</h1>"]
    if sw.untrusted:
        parts.append('<p class="warn">UNTRUSTED: agents ran without isolation; scores may use held-out data</p>')
    if note := foreign_note(sw.foreign).removeprefix("\n# "):
        parts.append(f'<p class="warn">{html.escape(note)}</p>')
    if sw.noise:
        parts.append('<p class="note">~: improvement within the measured evaluation noise (a2rl calibrate)</p>')
    parts.append("<h2>Results</h2>")
    parts += [_table(t, sw, out) for t in tables(sw, layout="paper")]
    parts.append("<h2>Prompt modes</h2>")
    heatmap_plot(sw, plots / "heatmap.svg")
    parts.append('<img class="heatmap" src="plots/heatmap.svg" alt="mode × task heatmap">')
    parts += [_table(t) for t in tables(sw, by="mode")]
    parts.append('<h2>Score against budget time, per cell</h2><div class="plots">')
    parts += [
        f'<img src="plots/{Path(path).name}" alt="{html.escape(title.replace(chr(10), " "))}">'
        for (title, _, _, drawn), path in cells
        if drawn
    ]
    parts.append("</div>")
    if empty := [title.split("\n")[0] for title, _, _, drawn in (c for c, _ in cells) if not drawn]:
        parts.append(f'<p class="note">no plot (no run scored a submission): {html.escape("; ".join(empty))}</p>')
    parts.append("<h2>Analyses</h2>")
    parts += [
        _table(t)
        for t in tables(sw, pass_at=PASS_AT, scaling=True, routes=True, failures=True, usage=True, submissions=True)
    ]
    if any(r.metrics is not None and r.metrics.inspector_verdicts for r in sw.runs):
        parts.append("<h2>Inspector</h2>")
        parts += [_table(t) for t in tables(sw, flags=True)]
    parts.append("<h2>Runs</h2>")
    rows = []
    for run in sw.runs:
        report = run.dir / "report"
        links = " ".join(
            filter(
                None,
                (
                    _link(out, viewer_path(run.sweep, run.spec.run_id), "viewer"),
                    _link(out, report / "summary.md", "summary"),
                    _link(out, report / "trajectory.png", "trajectory"),
                    _link(out, report / "metrics.json", "metrics"),
                    _link(out, run.dir / "agent.log", "agent log"),
                ),
            )
        )
        state = run.result.status if run.result else "no result"
        score = "—" if run.score is None else f"{run.score:.2f}"
        if run.result and run.result.foreign_submissions:
            score += " FOREIGN"
        rows.append(
            f'<tr id="run-{html.escape(run.spec.run_id)}"><td>{html.escape(run.spec.run_id)}</td>'
            f"<td>{html.escape(state)}</td><td>{score}</td>"
            f"<td>{html.escape(_failure(run))}</td><td>{html.escape(_flag(run))}</td>"
            f"<td>{links or 'no report yet'}</td></tr>"
        )
    parts.append(
        '<table class="runs"><tr><th>run</th><th>status</th><th>score</th><th>failure</th><th>inspector</th>'
        "<th>report</th></tr>" + "".join(rows) + "</table>"
    )
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>a2rl report</title>'
        f"<style>{STYLE}</style></head><body>\n" + "\n".join(parts) + "\n</body></html>\n"
    )
