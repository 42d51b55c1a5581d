"""The results table, from a synthetic sweep directory (records only, no jobs): rows are keyed by prompt mode."""

from __future__ import annotations

import math

import pytest

from a2rl.reporting.aggregate import HEADERS, mean_sem, render, rows
from a2rl.spec.grid import expand
from a2rl.spec.sweep import SweepSpec
from a2rl.store.baselines import BaselineRecord, baseline_path
from a2rl.store.results import RunResult
from a2rl.store.sweepdir import SweepDir


def test_mean_sem():
    assert mean_sem([80.0, 20.0]) == (50.0, 30.0)
    assert mean_sem([7.0]) == (7.0, 0.0)
    m, s = mean_sem([1.0, 2.0, 3.0])
    assert m == 2.0 and math.isclose(s, math.sqrt(1 / 3))


@pytest.fixture
def sweep(tmp_path) -> SweepDir:
    """claude on one driver in two prompt modes × two seeds; the echo task's baseline is 10."""
    spec = SweepSpec.model_validate(
        {
            "name": "agg",
            "tasks": ["echo"],
            "agents": ["claude"],
            "drivers": ["gpt-x"],
            "modes": ["free", "sft-only"],
            "models": ["builtin:tiny-llama"],
            "seeds": [0, 1],
            "budget": 60,
            "executor": "local",
        }
    )
    sweep = SweepDir(tmp_path / "sd")
    sweep.create(spec, "", expand(spec))
    BaselineRecord(
        task="echo",
        protocol="paper",
        model="tiny-llama",
        model_path="builtin:tiny-llama",
        weights_hash="h",
        evaluator_version=1,
        status="ok",
        score=10.0,
        graded_at=0.0,
    ).sign(sweep.key).dump(baseline_path(sweep, "echo", "tiny-llama", "paper"))
    return sweep


def finish(sweep: SweepDir, run, best: float | None, status: str = "ok") -> None:
    RunResult(
        run_id=run.run_id,
        task=run.task,
        protocol=run.protocol,
        agent=run.agent.key,
        driver=run.driver,
        model=run.model.name,
        seed=run.seed,
        status=status,
        baseline=10.0,
        best=best,
        submissions=1,
        valid_submissions=int(best is not None),
        budget_s=60,
        started_at=0.0,
        ended_at=1.0,
    ).sign(sweep.key).dump(sweep.result_path(run.run_id))


def by_mode_rows(sweep: SweepDir) -> dict[str, dict[str, str]]:
    problems: list[str] = []
    table = {row[HEADERS.index("mode")]: dict(zip(HEADERS, row)) for row in rows(sweep, problems)}
    assert problems == []  # every record verified
    return table


def test_prompt_modes_are_separate_rows(sweep):
    by_mode = {(r.mode, r.seed): r for r in sweep.runs()}
    assert len(by_mode) == 4
    for seed, (free, sft) in enumerate([(80.0, 20.0), (90.0, 30.0)]):
        finish(sweep, by_mode["free", seed], free)
        finish(sweep, by_mode["sft-only", seed], sft)
    table = by_mode_rows(sweep)
    assert set(table) == {"free", "sft-only"}
    assert table["free"]["best (mean ± SEM)"] == "85.00 ± 5.00" and table["free"]["improvement"] == "+75.00"
    assert table["sft-only"]["best (mean ± SEM)"] == "25.00 ± 5.00" and table["sft-only"]["improvement"] == "+15.00"
    assert all(
        row["runs ok"] == "2" and row["agent"] == "claude" and row["driver"] == "gpt-x" for row in table.values()
    )


def test_unfinished_and_failed_runs_stay_in_their_modes_row(sweep):
    by_mode = {(r.mode, r.seed): r for r in sweep.runs()}
    finish(sweep, by_mode["free", 0], 80.0)
    finish(sweep, by_mode["sft-only", 0], None)  # no valid submission: keeps the baseline
    finish(sweep, by_mode["sft-only", 1], None, status="failed")
    table = by_mode_rows(sweep)
    assert (table["free"]["best (mean ± SEM)"], table["free"]["runs ok"], table["free"]["runs failed"]) == (
        "80.00 ± 0.00",
        "1 (+1 unfinished)",
        "0",
    )
    assert (table["sft-only"]["best (mean ± SEM)"], table["sft-only"]["runs ok"], table["sft-only"]["runs failed"]) == (
        "—",
        "1",
        "1",
    )


def test_csv_has_a_mode_column(sweep):
    lines = render(sweep, "csv", []).splitlines()
    assert lines[0].split(",")[:5] == ["model", "task", "agent", "driver", "mode"]
    assert [line.split(",")[4] for line in lines[1:]] == ["free", "sft-only"]
