"""The runs of one or several sweep directories as the results tables see them (reporting/aggregate.py): their
runs merge by key; a run in two of them, or runs of one cell or baselines of one (task, model, protocol) that
disagree (budget, weights, evaluator), is an error.

A cell is base model × task × agent × driver × prompt mode × protocol, over seeds. A run's score is its best
submission's, or the base model's (its baseline) when it has no valid submission, as in the paper; improvement
is score − baseline. Failed runs have no score. Results and baselines that do not verify against their sweep's
key are left out, and each is named in `problems`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from a2rl.errors import SpecError
from a2rl.records import RecordError, read_many
from a2rl.reporting.metrics import RunMetrics, is_control
from a2rl.spec.grid import RunSpec
from a2rl.store.baselines import BaselineRecord, load_baseline
from a2rl.store.noise import NoiseRecord, load_noise
from a2rl.store.results import RunResult, load_result
from a2rl.store.sweepdir import SweepDir

WITHIN_NOISE = "~"
CONTROL = " (control agent)"  # after a control stack's name (spec/agents.py `control`) wherever it is shown
Key = tuple[str, str, str, str, str, str]  # model, task, agent, driver, mode, protocol
CELL = ["model", "task", "agent", "driver", "mode", "protocol"]


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

    def within_noise(self, task: str, model: str, protocol: str, improvement: float) -> bool | None:
        """Whether `improvement` is within the measured evaluation noise; None where none was measured."""
        noise = self.noise.get((task, model, protocol))
        return None if noise is None else noise.within(improvement)

    def marked(self, task: str, model: str, protocol: str, improvement: float) -> str:
        return WITHIN_NOISE if self.within_noise(task, model, protocol, improvement) else ""


def submitted_scores(runs: list[Run]) -> list[float]:
    """The scores of a cell's runs, as its Table-2 cell and the mode table count them: none when no run made a
    valid submission (a control that submits nothing, or a stack that never got one through), as the long table
    shows — for it: the base model's score repeated is no result of the stack's."""
    if not any(r.completed and r.result.best is not None for r in runs):
        return []
    return [r.score for r in runs if r.score is not None]


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
