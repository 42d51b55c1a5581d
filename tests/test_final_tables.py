"""The feedback/final tables (`feedback: split`): `final_table`, `final_paper_tables` and `final_data` on a synthetic
split sweep (records only, no jobs) whose numbers are worked out by hand below."""

from __future__ import annotations

import pytest

from a2rl.reporting.aggregate import Sweeps
from a2rl.reporting.tables import SPLIT_NOTE, final_data, final_paper_tables, final_table
from a2rl.spec.grid import RunSpec
from a2rl.store.baselines import BaselineRecord, baseline_path
from a2rl.store.ledger import LedgerEntry
from a2rl.store.results import build_result
from a2rl.store.sweepdir import SweepDir
from fakes import ledger_entry
from test_tables import build_sweep, make_sweep, write_baseline

# per task: (feedback-part items, final-part items, the base model's feedback score, its final-part score)
PARTS = {"gsm8k": (40, 60, 10.0, 12.0), "humaneval": (30, 50, 20.0, 18.0)}


def entry(run: RunSpec, seq: int, score: float | None, part: str, n: int, **kw) -> LedgerEntry:
    return ledger_entry(run.run_id, seq, score, task=run.task, protocol=run.protocol, part=part, n_items=n, **kw)


def finish_split(
    sweep: SweepDir,
    task: str,
    mode: str,
    seed: int,
    subs: list[float | None],
    pick: tuple[int, float] | None,
    protocol: str = "paper",
) -> None:
    """A split run: its feedback-part submissions (None: invalid) and the final pick (seq, final-part score)."""
    run = next(r for r in sweep.runs() if (r.task, r.mode, r.seed, r.protocol) == (task, mode, seed, protocol))
    fb_n, fi_n, _, _ = PARTS[task]
    entries = [entry(run, seq, s, "feedback", fb_n) for seq, s in enumerate(subs, 1)]
    final = None if pick is None else entry(run, pick[0], pick[1], "final", fi_n, selected_by="best-feedback")
    build_result(
        run,
        status="ok",
        entries=entries,
        baseline=BaselineRecord.load(baseline_path(sweep, task, "tiny-llama", protocol)),
        submitted=len(subs),
        final=final,
        failure_reason=None,
        agent_exit_code=0,
        agent_seconds=100.0,
        started_at=0.0,
        ended_at=100.0,
    ).sign(sweep.key).dump(sweep.result_path(run.run_id))


def split_baselines(sweep: SweepDir, parts=PARTS, protocol: str = "paper") -> None:
    for task, (_, _, score, final) in parts.items():
        write_baseline(sweep, task, protocol, score, part="feedback", final_score=final)


@pytest.fixture
def split(tmp_path) -> Sweeps:
    """gsm8k (base 10 on the feedback part, 12 on the final part):
    free: best 40 with its final pick 35; best 30, pick 24; seed 2 failed -> best [40, 30], final [35, 24],
      final improvement [23, 12], gap [5, 6]; each n=2 of 3 runs.
    sft-only: no valid submission (the base model's 10 and 12); 16 with no final score yet; 13 whose pick scored
      14 -> best [10, 16, 13], final [12, 14], final improvement [0, 2], gap [-2, -1].
    humaneval (base 20, final 18): free 50/44, 60/50, 70/56 -> final improvement [26, 32, 38], gap [6, 10, 14];
      sft-only: no run finished (not a split cell)."""
    sweep = make_sweep(tmp_path / "s", base_scores=())
    split_baselines(sweep)
    finish_split(sweep, "gsm8k", "free", 0, [20.0, 40.0], (2, 35.0))
    finish_split(sweep, "gsm8k", "free", 1, [30.0], (1, 24.0))
    run = next(r for r in sweep.runs() if (r.task, r.mode, r.seed) == ("gsm8k", "free", 2))
    base = BaselineRecord.load(baseline_path(sweep, "gsm8k", "tiny-llama", "paper"))
    build_result(
        run,
        status="failed",
        entries=[],
        baseline=base,
        submitted=0,
        failure_reason="node lost",
        agent_exit_code=None,
        agent_seconds=0.0,
        started_at=0.0,
        ended_at=1.0,
    ).sign(sweep.key).dump(sweep.result_path(run.run_id))
    finish_split(sweep, "gsm8k", "sft-only", 0, [None], None)
    finish_split(sweep, "gsm8k", "sft-only", 1, [16.0], None)
    finish_split(sweep, "gsm8k", "sft-only", 2, [13.0], (1, 14.0))
    for seed, (best, fin) in enumerate([(50.0, 44.0), (60.0, 50.0), (70.0, 56.0)]):
        finish_split(sweep, "humaneval", "free", seed, [best], (1, fin))
    return Sweeps([sweep])


def cell(task: str, mode: str) -> dict:
    return {"model": "tiny-llama", "task": task, "agent": "claude", "driver": "gpt-x", "mode": mode}


def test_final_data_is_the_feedback_best_the_picks_final_score_and_their_gap(split):
    sem_3 = 3**-0.5  # the SEM of three values 1 apart from their mean, per unit
    key = ("tiny-llama", "gsm8k", "claude", "gpt-x", "free", "paper")
    assert final_data(key, split.cells[key]) == pytest.approx(
        cell("gsm8k", "free")
        | {"protocol": "paper", "baseline_final": 12.0, "runs": 3}
        | {"best_mean": 35.0, "best_sem": 5.0, "best_n": 2, "final_mean": 29.5, "final_sem": 5.5, "final_n": 2}
        | {"final_improvement_mean": 17.5, "final_improvement_sem": 5.5, "final_improvement_n": 2}
        | {"selection_gap_mean": 5.5, "selection_gap_sem": 0.5, "selection_gap_n": 2}
    )
    key = ("tiny-llama", "gsm8k", "claude", "gpt-x", "sft-only", "paper")
    assert final_data(key, split.cells[key]) == pytest.approx(
        cell("gsm8k", "sft-only")
        | {"protocol": "paper", "baseline_final": 12.0, "runs": 3}
        | {"best_mean": 13.0, "best_sem": 3 * sem_3, "best_n": 3, "final_mean": 13.0, "final_sem": 1.0, "final_n": 2}
        | {"final_improvement_mean": 1.0, "final_improvement_sem": 1.0, "final_improvement_n": 2}
        | {"selection_gap_mean": -1.5, "selection_gap_sem": 0.5, "selection_gap_n": 2}
    )
    key = ("tiny-llama", "humaneval", "claude", "gpt-x", "free", "paper")
    assert final_data(key, split.cells[key]) == pytest.approx(
        cell("humaneval", "free")
        | {"protocol": "paper", "baseline_final": 18.0, "runs": 3}
        | {"best_mean": 60.0, "best_sem": 10 * sem_3, "best_n": 3, "final_mean": 50.0, "final_sem": 6 * sem_3}
        | {"final_n": 3, "final_improvement_mean": 32.0, "final_improvement_sem": 6 * sem_3}
        | {"final_improvement_n": 3, "selection_gap_mean": 10.0, "selection_gap_sem": 4 * sem_3, "selection_gap_n": 3}
    )


def test_final_table_shows_the_split_cells_with_n_where_runs_lack_a_score(split):
    t = final_table(split)
    assert t.headers == [
        *["model", "task", "agent", "driver", "mode", "protocol"],
        *["best feedback", "final", "base model final", "final improvement", "selection gap"],
    ]
    cells = [
        ["tiny-llama", task, "claude", "gpt-x", mode, "paper"]
        for task, mode in (("gsm8k", "free"), ("gsm8k", "sft-only"))
    ]
    assert t.rows == [
        cells[0] + ["35.00 ± 5.00 (n=2)", "29.50 ± 5.50 (n=2)", "12.00", "+17.50 ± 5.50 (n=2)", "+5.50 ± 0.50 (n=2)"],
        cells[1] + ["13.00 ± 1.73", "13.00 ± 1.00 (n=2)", "12.00", "+1.00 ± 1.00 (n=2)", "-1.50 ± 0.50 (n=2)"],
        ["tiny-llama", "humaneval", "claude", "gpt-x", "free", "paper"]
        + ["60.00 ± 5.77", "50.00 ± 3.46", "18.00", "+32.00 ± 3.46", "+10.00 ± 2.31"],
    ]
    assert t.notes == [
        SPLIT_NOTE,
        "gsm8k: feedback part 40 items, final part 60 items",
        "humaneval: feedback part 30 items, final part 50 items",
    ]
    assert (t.title, t.name) == ("feedback and final parts", "final")
    assert [(d["task"], d["mode"], d["final_mean"]) for d in t.data] == [
        ("gsm8k", "free", 29.5),
        ("gsm8k", "sft-only", 13.0),
        ("humaneval", "free", 50.0),
    ]


def test_final_paper_table_is_the_base_models_final_score_then_a_row_per_stack(split):
    (t,) = final_paper_tables(split)
    assert (t.title, t.name) == ("Table 2, final part: tiny-llama", "paper_final")
    assert t.headers == ["stack / driver", "gsm8k", "humaneval"]
    assert t.rows == [
        ["base model", "12.00", "18.00"],
        ["claude / gpt-x [free]", "29.50 ± 5.50 (n=2) (gap +5.50)", "50.00 ± 3.46 (gap +10.00)"],
        ["claude / gpt-x [sft-only]", "13.00 ± 1.00 (n=2) (gap -1.50)", "—"],  # humaneval sft-only: no data
    ]
    assert t.notes[1:] == [
        "gsm8k: feedback part 40 items, final part 60 items",
        "humaneval: feedback part 30 items, final part 50 items",
    ]
    assert t.notes[0].startswith("cells: final-part score of each run's selected submission")
    assert [(d["task"], d["mode"], d["selection_gap_mean"]) for d in t.data] == [
        ("gsm8k", "free", 5.5),
        ("gsm8k", "sft-only", -1.5),
        ("humaneval", "free", 10.0),
    ]


def test_a_cell_without_final_scores_shows_dashes_and_no_gap(tmp_path):
    """The base model's final part not scored and no run's pick scored yet: no final, improvement or gap."""
    sweep = make_sweep(tmp_path / "s", seeds=(0,), tasks=("gsm8k",), base_scores=())  # a cell of one run
    split_baselines(sweep, {"gsm8k": (40, 60, 10.0, None)})
    finish_split(sweep, "gsm8k", "free", 0, [20.0], None)
    sw = Sweeps([sweep])
    key = ("tiny-llama", "gsm8k", "claude", "gpt-x", "free", "paper")
    assert final_data(key, sw.cells[key]) == cell("gsm8k", "free") | {"protocol": "paper", "runs": 1} | {
        "best_mean": 20.0,
        "best_sem": None,  # one value: no SEM
        "best_n": 1,
        **{f"{name}_{s}": None for name in ("final", "final_improvement", "selection_gap") for s in ("mean", "sem")},
        **{f"{name}_n": 0 for name in ("final", "final_improvement", "selection_gap")},
        "baseline_final": None,
    }
    (row,) = final_table(sw).rows
    assert row[6:] == ["20.00 ± 0.00", "—", "—", "—", "—"]
    (t,) = final_paper_tables(sw)
    assert t.rows == [["base model", "—"], ["claude / gpt-x [free]", "—"]]
    assert t.notes[1:] == []  # no final part scored: its size is not known


def test_each_protocol_with_split_cells_is_its_own_block_named_after_it(tmp_path):
    """Two protocols, only the second (a2rl) scored under `feedback: split`: one block, the first skipped."""
    sweep = make_sweep(tmp_path / "s", seeds=(0,), tasks=("gsm8k",), protocols=("paper", "a2rl"), base_scores=())
    split_baselines(sweep, {"gsm8k": (40, 60, 10.0, 12.0)}, protocol="a2rl")
    finish_split(sweep, "gsm8k", "free", 0, [20.0], (1, 15.0), protocol="a2rl")
    (t,) = final_paper_tables(Sweeps([sweep]))
    assert t.title == "Table 2, final part: tiny-llama (protocol a2rl)"
    assert t.rows == [["base model", "12.00"], ["claude / gpt-x [free]", "15.00 ± 0.00 (gap +5.00)"]]
    assert t.notes == [
        "cells: final-part score of each run's selected submission, mean ± SEM over seeds; gap: best feedback-part "
        "score − final, mean over seeds",
        "gsm8k: feedback part 40 items, final part 60 items",
    ]


def test_sweeps_without_a_split_cell_have_no_final_tables(tmp_path):
    sw = Sweeps([build_sweep(tmp_path / "a")])
    assert final_table(sw) is None
    assert final_paper_tables(sw) == []
