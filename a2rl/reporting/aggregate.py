"""The results tables (`a2rl aggregate SWEEP_DIR...`, same as `python -m a2rl.aggregate`), from one or several
sweep directories (one sweep per task or model is common): their runs merge by key; a run in two of them, or
runs of one cell or baselines of one (task, model, protocol) that disagree (budget, weights, evaluator), is an
error. Runs scored under different evaluation protocols are different experiments, never averaged together.

A cell is base model × task × agent × driver × prompt mode, over seeds (runs in different modes are different
experiments: never averaged together). A run's score is its best submission's, or the base model's (its
baseline) when it has no valid submission, as in the paper; improvement is score − baseline. Failed runs have
no score. Results and baselines that do not verify against their sweep's key are left out, and each is named
in `problems` (the command prints them to stderr).

Tables: the long table (one row per cell; the default); `--layout paper`, one Table-2 block per base model
(first row the base model, then one row per stack + driver [+ mode], a column per task; mean ± SEM over seeds,
with n when seeds are missing); `--by mode`, mode × task mean improvement (the heatmap); `--pass-at 1,3,5`;
`--scaling` (best score at budget fractions, token counts and submission counts); `--routes` (training of the best
submissions); `--failures` (by cause: infrastructure or agent); `--usage` (tokens and cost); `--submissions`
(per run). Where `a2rl calibrate` measured the evaluation noise, improvements within it are marked `~`.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tabulate import tabulate

from a2rl.errors import SpecError
from a2rl.records import RecordError, read_many
from a2rl.reporting.metrics import RunMetrics, is_control
from a2rl.spec.grid import RunSpec
from a2rl.store.baselines import BaselineRecord, load_baseline
from a2rl.store.noise import NoiseRecord, load_noise
from a2rl.store.results import RunResult, load_result
from a2rl.store.sweepdir import SweepDir

FORMATS = ["simple", "github", "latex", "csv", "json"]
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
FRACTIONS = (0.25, 0.5, 0.75, 1.0)  # of the budget, for --scaling
TOKEN_POINTS = (10_000, 100_000, 1_000_000)
SUBMISSION_POINTS = (1, 3, 5)
WITHIN_NOISE = "~"
BASE_ROW = "base model"  # Table 2's first row: the untouched model's score, never to be read as the control agent
CONTROL = " (control agent)"  # after a control stack's name (spec/agents.py `control`) wherever it is shown
Key = tuple[str, str, str, str, str, str]  # model, task, agent, driver, mode, protocol


def mean_sem(xs: list[float]) -> tuple[float, float]:
    m = sum(xs) / len(xs)
    if len(xs) < 2:
        return m, 0.0
    var = sum((x - m) ** 2 for x in xs) / (len(xs) - 1)
    return m, math.sqrt(var / len(xs))


def expected_best_of(xs: list[float], k: int) -> float:
    """pass@k as expected best improvement: E[max of k runs drawn without replacement from the cell's n].

    With the n values sorted ascending x_(1) ≤ … ≤ x_(n), the i-th is the maximum of exactly C(i−1, k−1) of the
    C(n, k) equally likely k-subsets, so E = Σ_{i=k..n} C(i−1, k−1) / C(n, k) · x_(i) (the unbiased estimator
    of Chen et al. 2021, with the score in place of pass/fail). Requires k ≤ n.
    """
    xs, n = sorted(xs), len(xs)
    if not 1 <= k <= n:
        raise ValueError(f"pass@{k} needs at least {k} runs, the cell has {n}")
    return sum(math.comb(i - 1, k - 1) * xs[i - 1] for i in range(k, n + 1)) / math.comb(n, k)


@dataclass
class Run:
    """One run as the tables see it: its spec, verified result and baseline, and its run report's metrics
    (derived, rebuilt by `a2rl runreport`; None where not written yet; read by Sweeps.with_metrics)."""

    spec: RunSpec
    sweep: SweepDir
    base: BaselineRecord | None
    result: RunResult | None = None
    metrics: RunMetrics | None = None
    dir: Path = field(init=False)  # runs/<id>/, joined once: a big sweep's paths cost more than its reading

    def __post_init__(self) -> None:
        self.dir = self.sweep.run_dir(self.spec.run_id)

    def load_metrics(self, raw: bytes | OSError) -> None:
        try:
            self.metrics = RunMetrics.load_or_none(self.dir / "report/metrics.json", raw)
        except RecordError:
            self.metrics = None

    @property
    def completed(self) -> bool:
        return self.result is not None and self.result.status != "failed"

    @property
    def base_score(self) -> float | None:
        return self.base.score if self.base is not None and self.base.status == "ok" else None

    @property
    def score(self) -> float | None:
        if not self.completed:
            return None
        return self.result.best if self.result.best is not None else self.base_score

    @property
    def improvement(self) -> float | None:
        s, b = self.score, self.base_score
        return None if s is None or b is None else s - b

    @property
    def split(self) -> bool:
        """Scored under `feedback: split`: `score` is on the feedback part, `final` on the final part."""
        return self.result is not None and self.result.feedback == "split"

    @property
    def base_final(self) -> float | None:
        return self.base.final_score if self.base is not None and self.base.status == "ok" else None

    @property
    def final(self) -> float | None:
        """The final-part score of the run's selected submission; the base model's where the run has no valid
        submission (as `score`); None until the grader has scored it, or where it could not."""
        if not self.completed or not self.split:
            return None
        return self.result.final if self.result.best is not None else self.base_final

    @property
    def selection_gap(self) -> float | None:
        """Best feedback-part score − final-part score: what choosing on the feedback part's noise added."""
        s, f = self.score, self.final
        return None if s is None or f is None else s - f

    def _best(self, scores: Iterable[float]) -> float | None:
        """The best of `scores` and the baseline (a run scores its baseline until it beats it)."""
        return max([*scores, *([self.base_score] if self.base_score is not None else [])], default=None)

    def best_after(self, ks: list[int]) -> list[float | None]:
        """The run's score counting only its first k graded submissions (all of them when it made fewer), for
        each k; None when the run has no score."""
        if self.score is None:
            return [None] * len(ks)
        return [self._best(s for s in self.result.scores[:k] if s is not None) for k in ks]

    def scored(self, at: str) -> list[tuple[float | None, float]]:
        """(when, score) of each valid submission; `at`: "budget_s" (budget clock) or "tokens" (the agent's)."""
        r = self.result
        when = r.submitted_budget_s if at == "budget_s" else r.submitted_tokens
        return [(w, s) for w, s in zip(when, r.scores) if s is not None]

    def best_within(self, at: str, limits: list[float]) -> list[float | None]:
        """The run's score by each limit (budget seconds or tokens), counting only the submissions made by then;
        None when the run has no score or a submission does not say when it was made."""
        if self.score is None:
            return [None] * len(limits)
        scored = self.scored(at)
        if any(when is None for when, _ in scored):
            return [None] * len(limits)
        return [self._best(s for when, s in scored if when <= limit) for limit in limits]


@dataclass
class Sweeps:
    """The runs of one or several sweep directories, by cell, with the baselines and noise records."""

    dirs: list[SweepDir]
    problems: list[str] = field(default_factory=list)
    cells: dict[Key, list[Run]] = field(default_factory=dict)
    baselines: dict[tuple[str, str, str], BaselineRecord | None] = field(default_factory=dict)
    noise: dict[tuple[str, str, str], NoiseRecord] = field(default_factory=dict)
    _controls: dict[tuple[Path, str], bool] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        where: dict[str, tuple[RunSpec, Path]] = {}
        for sweep in self.dirs:
            bases: dict[tuple[str, str, str], BaselineRecord | None] = {}  # this sweep's, read once each
            for spec in sweep.runs():
                if spec.run_id in where:
                    other, path = where[spec.run_id]
                    what = "conflicting specs for" if other != spec else "the same run"
                    raise SpecError(
                        [f"{what} {spec.run_id} in {path} and {sweep.root}: merge sweeps that hold different runs"]
                    )
                where[spec.run_id] = (spec, sweep.root)
                pair = (spec.task, spec.model.name, spec.protocol)
                base = bases[pair] if pair in bases else bases.setdefault(pair, self._baseline(sweep, *pair))
                run = Run(spec, sweep, base)
                agent = spec.agent.key + (CONTROL if self._control(sweep, spec.agent.name) else "")
                key = (spec.model.name, spec.task, agent, spec.driver, spec.mode, spec.protocol)
                cell = self.cells.setdefault(key, [])
                if cell and cell[0].spec.budget_s != spec.budget_s:
                    raise SpecError(
                        [
                            f"conflicting specs for {' / '.join(key)}: budget {cell[0].spec.budget_s:g} s "
                            f"in {cell[0].sweep.root}, {spec.budget_s:g} s in {sweep.root}"
                        ]
                    )
                cell.append(run)
        for run, raw in self._read("result.json"):
            run.result = load_result(run.sweep, run.spec.run_id, self.problems, raw)
        self._metrics_read = False
        self._modes = list(dict.fromkeys(k[4] for k in self.cells))
        self._protocols = list(dict.fromkeys(k[5] for k in self.cells))

    def _control(self, sweep: SweepDir, agent: str) -> bool:
        if (sweep.root, agent) not in self._controls:
            self._controls[sweep.root, agent] = is_control(sweep, agent)
        return self._controls[sweep.root, agent]

    def _read(self, name: str) -> Iterator[tuple[Run, bytes | OSError]]:
        """Every run with the bytes of its file `name` (under runs/<id>/), read ahead (records.read_many)."""
        runs = self.runs
        return zip(runs, read_many([r.dir / name for r in runs]))

    def with_metrics(self) -> "Sweeps":
        """Read the runs' report metrics (once), for the tables that need them."""
        if not self._metrics_read:
            for run, raw in self._read("report/metrics.json"):
                run.load_metrics(raw)
            self._metrics_read = True
        return self

    def _baseline(self, sweep: SweepDir, task: str, model: str, protocol: str) -> BaselineRecord | None:
        new = load_baseline(sweep, task, model, protocol, self.problems)
        if (task, model, protocol) not in self.baselines:
            self.baselines[task, model, protocol] = new
            if (noise := load_noise(sweep, task, model, protocol, self.problems)) is not None:
                self.noise[task, model, protocol] = noise
        old = self.baselines[task, model, protocol]
        if old is None:
            self.baselines[task, model, protocol] = old = new
        elif new is not None and (old.weights_hash, old.evaluator_version) != (new.weights_hash, new.evaluator_version):
            raise SpecError(
                [
                    f"conflicting baselines for {task} / {model} / {protocol}: the sweeps graded different weights or "
                    f"evaluator versions"
                ]
            )
        return old

    @property
    def runs(self) -> list[Run]:
        return [r for cell in self.cells.values() for r in cell]

    @property
    def untrusted(self) -> bool:
        return any(s.spec.isolation == "none" for s in self.dirs)

    @property
    def foreign(self) -> dict[str, list[int]]:
        """Run id -> seqs of its submissions the grader found not trained from the base model (lineage)."""
        return {
            r.spec.run_id: r.result.foreign_submissions for r in self.runs if r.result and r.result.foreign_submissions
        }

    def tasks(self, model: str | None = None, protocol: str | None = None) -> list[str]:
        return list(dict.fromkeys(k[1] for k in self.cells if model in (None, k[0]) and protocol in (None, k[5])))

    def blocks(self) -> list[tuple[str, str]]:
        """(model, protocol) pairs in order: one Table-2 block each."""
        return list(dict.fromkeys((k[0], k[5]) for k in self.cells))

    def models(self) -> list[str]:
        return list(dict.fromkeys(k[0] for k in self.cells))

    def modes(self) -> list[str]:
        return self._modes

    def label(self, key: Key) -> str:
        """A cell's row name: stack + driver, and the mode when the sweeps have several."""
        _, _, agent, driver, mode, _ = key
        return f"{agent} / {driver}" + (f" [{mode}]" if len(self._modes) > 1 else "")

    def marked(self, task: str, model: str, protocol: str, improvement: float) -> str:
        noise = self.noise.get((task, model, protocol))
        return WITHIN_NOISE if noise is not None and noise.within(improvement) else ""


@dataclass
class Table:
    title: str
    headers: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)
    keys: dict[tuple[int, int], Key] = field(default_factory=dict)  # (row, column): the cell whose runs it shows


def _f(v: float | None, signed: bool = False) -> str:
    return "—" if v is None else (f"{v:+.2f}" if signed else f"{v:.2f}")


def _ms(xs: list[float], expected: int, signed: bool = False) -> str:
    """mean ± SEM, with n when fewer than `expected` values are there."""
    if not xs:
        return "—"
    m, s = mean_sem(xs)
    return f"{_f(m, signed)} ± {s:.2f}" + (f" (n={len(xs)})" if len(xs) < expected else "")


def _cell_keys(sw: Sweeps) -> list[Key]:
    models, tasks = {m: i for i, m in enumerate(sw.models())}, {t: i for i, t in enumerate(sw.tasks())}
    return sorted(sw.cells, key=lambda k: (models[k[0]], tasks[k[1]]))


def long_table(sw: Sweeps) -> Table:
    out = []
    for (model, task, agent, driver, mode, protocol), runs in sw.cells.items():
        base = sw.baselines[task, model, protocol]
        base_txt = (
            "pending" if base is None else (f"FAILED: {base.error}" if base.status == "failed" else f"{base.score:.2f}")
        )
        results = [r.result for r in runs if r.result is not None]
        completed = [r for r in runs if r.completed]
        best_txt = impr_txt = "—"
        scores = [r.score for r in completed]
        if completed and any(r.result.best is not None for r in completed) and None not in scores:
            m, s = mean_sem(scores)
            best_txt = f"{m:.2f} ± {s:.2f}"
            if (b := runs[0].base_score) is not None:  # else pending or failed: no improvement to tell
                impr_txt = f"{m - b:+.2f}{sw.marked(task, model, protocol, m - b)}"
        subs = sum(r.submissions for r in results)
        valid = sum(r.valid_submissions for r in results)
        unfinished = len(runs) - len(results)
        ok_txt = str(len(completed)) + (f" (+{unfinished} unfinished)" if unfinished else "")
        out.append(
            [
                task,
                agent,
                driver,
                mode,
                model,
                protocol,
                base_txt,
                best_txt,
                impr_txt,
                f"{subs} ({valid} valid)",
                ok_txt,
                str(len(results) - len(completed)),
            ]
        )
    return Table("results", HEADERS, out)


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


def final_table(sw: Sweeps) -> Table | None:
    """The cells scored under `feedback: split`: the paper's number beside the clean one, with the items behind
    each and the selection gap; None when no cell was."""
    keys = _split_keys(sw)
    if not keys:
        return None
    rows = []
    for key in keys:
        runs = sw.cells[key]
        best = [r.score for r in runs if r.score is not None]
        final = [r.final for r in runs if r.final is not None]
        gaps = [r.selection_gap for r in runs if r.selection_gap is not None]
        impr = [f - r.base_final for r in runs if (f := r.final) is not None and r.base_final is not None]
        rows.append(
            list(key)
            + [
                _ms(best, len(runs)),
                _ms(final, len(runs)),
                _f(runs[0].base_final),
                _ms(impr, len(runs), signed=True),
                _ms(gaps, len(runs), signed=True),
            ]
        )
    headers = CELL + ["best feedback", "final", "base model final", "final improvement", "selection gap"]
    return Table("feedback and final parts", headers, rows, [SPLIT_NOTE, *_items(sw, keys)])


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
        for key in mine:
            row = rows.setdefault(sw.label(key), [sw.label(key)] + ["—"] * len(tasks))
            runs = sw.cells[key]
            final = [r.final for r in runs if r.final is not None]
            gaps = [r.selection_gap for r in runs if r.selection_gap is not None]
            text = _ms(final, len(runs))
            if gaps:
                text += f" (gap {mean_sem(gaps)[0]:+.2f})"
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
            )
        )
    return out


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
        for key in _cell_keys(sw):
            if (key[0], key[5]) != (model, protocol):
                continue
            row = rows.setdefault(sw.label(key), [sw.label(key)] + ["—"] * len(tasks))
            runs = sw.cells[key]
            scores = submitted_scores(runs)
            text = _ms(scores, len(runs))
            base = runs[0].base_score
            if scores and base is not None:
                text += sw.marked(key[1], model, protocol, mean_sem(scores)[0] - base)
            row[1 + tasks.index(key[1])] = text
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
            )
        )
    return out


def submitted_scores(runs: list[Run]) -> list[float]:
    """The scores of a cell's runs, as its Table-2 cell and the mode table count them: none when no run made a
    valid submission (a control that submits nothing, or a stack that never got one through), as the long table
    shows — for it: the base model's score repeated is no result of the stack's."""
    if not any(r.completed and r.result.best is not None for r in runs):
        return []
    return [r.score for r in runs if r.score is not None]


def _by_mode(sw: Sweeps) -> tuple[list[tuple[str, str]], list[str], dict[tuple[str, str, str], list[float]]]:
    """Improvements of every run with one, by (mode, stack / driver, task) over base models: stacks are compared
    within a mode, never averaged together (the reference agent and a control that submits nothing make a
    mean that means nothing)."""
    by: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    rows: list[tuple[str, str]] = []
    for mode in sw.modes():
        for (_, task, agent, driver, m, _), runs in sw.cells.items():
            if m != mode:
                continue
            row = (mode, f"{agent} / {driver}")
            rows += [row] if row not in rows else []
            base = runs[0].base_score
            by[(*row, task)] += [s - base for s in submitted_scores(runs) if base is not None]
    return rows, sw.tasks(), by


def mode_table(sw: Sweeps) -> Table:
    rows, tasks, by = _by_mode(sw)
    out = [
        [mode, stack]
        + [
            _ms(by[mode, stack, t], 0, signed=True) + (f" (n={len(by[mode, stack, t])})" if by[mode, stack, t] else "")
            for t in tasks
        ]
        for mode, stack in rows
    ]
    return Table(
        "improvement by mode",
        ["mode", "stack / driver", *tasks],
        out,
        ["cells: mean ± SEM over runs (n); — where no run of the stack made a valid submission"],
    )


def heatmap(sw: Sweeps) -> tuple[list[str], list[str], list[list[float | None]]]:
    """The numbers of mode_table: (rows "mode · stack / driver", tasks, mean improvement or None)."""
    rows, tasks, by = _by_mode(sw)
    grid = [[mean_sem(by[m, s, t])[0] if by[m, s, t] else None for t in tasks] for m, s in rows]
    return [f"{m} · {s}" for m, s in rows], tasks, grid


CELL = ["model", "task", "agent", "driver", "mode", "protocol"]


def pass_at_table(sw: Sweeps, ks: list[int]) -> Table:
    rows = []
    for key in _cell_keys(sw):
        runs = sw.cells[key] if submitted_scores(sw.cells[key]) else []  # none submitted: no improvement to tell
        xs = [r.improvement for r in runs if r.improvement is not None]
        rows.append(
            list(key) + [str(len(xs))] + [_f(expected_best_of(xs, k), True) if k <= len(xs) else "—" for k in ks]
        )
    return Table(
        "pass@k: expected best improvement over k runs",
        CELL + ["n"] + [f"pass@{k}" for k in ks],
        rows,
        ["— where the cell has fewer than k runs with a score, or no run of it made a valid submission"],
    )


def scaling_table(sw: Sweeps) -> Table:
    with_tokens = any(t is not None for r in sw.runs if r.completed for t in r.result.submitted_tokens)
    headers = (
        [f"@{f:.0%} budget" for f in FRACTIONS]
        + ([f"@{t:,} tokens" for t in TOKEN_POINTS] if with_tokens else [])
        + [f"@{k} submission{'s' if k > 1 else ''}" for k in SUBMISSION_POINTS]
    )
    rows = []
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
        rows.append(list(key) + [_ms([v for v in column if v is not None], len(runs)) for column in columns])
    return Table(
        "scaling: best score so far",
        CELL + headers,
        rows,
        [
            "a run without a valid submission by then scores its baseline; @k submissions: its first k graded"
            " ones (all, when it made fewer); — where no run of the cell made a valid submission"
        ],
    )


def routes_table(sw: Sweeps) -> Table:
    sw.with_metrics()
    rows = []
    for key in _cell_keys(sw):
        routes = Counter(
            (r.metrics.train_type if r.metrics else "?")
            for r in sw.cells[key]
            if r.completed and r.result.best is not None
        )
        rows.append(list(key) + [", ".join(f"{t}×{n}" for t, n in routes.most_common()) or "—"])
    return Table(
        "routes of the best submissions",
        CELL + ["training (runs)"],
        rows,
        ["from each run's report (TRL classes in the code behind its best submission); ? = no report yet"],
    )


def failure_cause(run: Run) -> tuple[str | None, str | None]:
    """(infra | agent | None, failure type): failed runs are the infrastructure's; the rest as the run report
    judged them (metrics.failure_source)."""
    if run.result is None:
        return None, None
    if run.result.status == "failed":
        return "infra", "run failed"
    if run.metrics is None:
        return (None, None) if run.improvement is not None and run.improvement > 0 else ("agent", "unknown")
    return run.metrics.failure_source, run.metrics.failure_type


def failures_table(sw: Sweeps) -> Table:
    sw.with_metrics()
    rows = []
    for key in _cell_keys(sw):
        causes = [failure_cause(r) for r in sw.cells[key]]
        types = Counter(t for src, t in causes if src == "agent")
        rows.append(
            list(key)
            + [
                str(sum(s == "infra" for s, _ in causes)),
                str(sum(s == "agent" for s, _ in causes)),
                ", ".join(f"{t}×{n}" for t, n in types.most_common()) or "—",
            ]
        )
    return Table(
        "failures by cause",
        CELL + ["infrastructure", "agent", "agent failure types"],
        rows,
        [
            "infrastructure: set-up, supervision, baseline or grading did not complete; agent: the run ended "
            "without improving on its baseline"
        ],
    )


def usage_table(sw: Sweeps) -> Table:
    rows = []
    for key in _cell_keys(sw):
        usages = [r.result.usage for r in sw.cells[key] if r.result is not None and r.result.usage is not None]
        tokens = [u.input_tokens + (u.output_tokens or 0) for u in usages if u.input_tokens is not None]
        costs = [u.cost_usd for u in usages if u.cost_usd is not None]
        rows.append(
            list(key)
            + [
                f"{mean_sem(tokens)[0]:,.0f}" if tokens else "—",
                f"{sum(tokens):,}" if tokens else "—",
                f"{sum(costs) / len(costs):.2f}" if costs else "—",
                f"{sum(costs):.2f}" if costs else "—",
            ]
        )
    return Table(
        "tokens and cost",
        CELL + ["tokens / run", "tokens", "cost $ / run", "cost $"],
        rows,
        ["from the agents' transcripts; — where the stack reports none"],
    )


def submissions_table(sw: Sweeps) -> Table:
    rows = []
    for key in _cell_keys(sw):
        results = [r.result for r in sw.cells[key] if r.result is not None]
        subs = [float(r.submissions) for r in results]
        valid = sum(r.valid_submissions for r in results)
        rows.append(list(key) + [_ms(subs, 0), f"{valid / sum(subs):.0%}" if sum(subs) else "—"])
    return Table("submissions per run", CELL + ["submissions (mean ± SEM)", "valid"], rows)


def flags_table(sw: Sweeps) -> Table:
    """The inspector's verdicts per run (a2rl inspect): the run's flag (its worst verdict) and each question's,
    a researcher's override marked; runs not inspected are counted in a note. Scores are not touched."""
    sw.with_metrics()
    inspected = [r for r in sw.runs if r.metrics is not None and r.metrics.inspector_verdicts]
    questions = list(dict.fromkeys(v.question for r in inspected for v in r.metrics.inspector_verdicts))
    rows = []
    for r in inspected:
        by_q = {v.question: v for v in r.metrics.inspector_verdicts}
        cells = [
            "—" if v is None else v.verdict + (" (overridden)" if v.override else "")
            for v in (by_q.get(q) for q in questions)
        ]
        rows.append([r.spec.run_id, r.metrics.inspector_flag or "—", *cells])
    notes = ["an LLM judge's verdicts with their evidence in each run's report; unknown: the judge gave none"]
    if missing := len(sw.runs) - len(inspected):
        notes.append(f"{missing} run(s) not inspected (a2rl inspect)")
    return Table("inspector flags", ["run", "flag", *questions], rows, notes)


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
    out += [flags_table(sw)] if flags else []
    return out or main_tables(sw)


def main_tables(sw: Sweeps) -> list[Table]:
    """The long table, and the feedback/final table where cells were scored under `feedback: split`."""
    return [long_table(sw)] + [t for t in [final_table(sw)] if t is not None]


def format_tables(sw: Sweeps, ts: list[Table], fmt: str) -> str:
    notes = [f"{WITHIN_NOISE}: within the measured evaluation noise (a2rl calibrate)"] if sw.noise else []
    if fmt == "json":
        return json.dumps(
            {
                "tables": [{"title": t.title, "headers": t.headers, "rows": t.rows, "notes": t.notes} for t in ts],
                "notes": notes,
                "untrusted": sw.untrusted,
                "foreign": sw.foreign,
            },
            indent=1,
        )
    parts = []
    for t in ts:
        head = [f"# {t.title}"] if len(ts) > 1 else []
        if fmt == "csv":
            buf = io.StringIO()
            w = csv.writer(buf, lineterminator="\n")
            w.writerow(t.headers)
            w.writerows(t.rows)
            body = buf.getvalue().rstrip("\n")
        else:
            body = tabulate(t.rows, headers=t.headers, tablefmt=fmt, disable_numparse=True)
        parts.append("\n".join(head + [body] + ([f"# {n}" for n in t.notes] if len(ts) > 1 else [])))
    return (
        "\n\n".join(parts)
        + "".join(f"\n# {n}" for n in notes)
        + untrusted_note(sw.untrusted)
        + foreign_note(sw.foreign)
    )


def rows(sweep: SweepDir, problems: list[str]) -> list[list[str]]:
    sw = Sweeps([sweep])
    problems += sw.problems
    return long_table(sw).rows


def render(sweep: SweepDir, fmt: str, problems: list[str]) -> str:
    """The long table of one sweep (what `launch --wait` prints at the end)."""
    sw = Sweeps([sweep])
    problems += sw.problems
    return format_tables(sw, main_tables(sw), fmt)


def untrusted_note(untrusted: bool) -> str:
    """Agents run without a sandbox could read held-out data and other runs: say so under every table."""
    return "\n# UNTRUSTED: isolation: none (agents ran unisolated; scores may use held-out data)" if untrusted else ""


def foreign_note(foreign: dict[str, list[int]]) -> str:
    """Runs that submitted a model not plausibly trained from the base (grader.foreign: flag scores it): say so
    under every table, naming them, since their scores may not be the agent's training."""
    if not foreign:
        return ""
    named = "; ".join(f"{run} (submission {', '.join(map(str, seqs))})" for run, seqs in sorted(foreign.items()))
    return f"\n# FOREIGN: {len(foreign)} run(s) submitted models not plausibly trained from the base model: {named}"
