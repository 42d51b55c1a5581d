"""The long table (`a2rl aggregate`'s default) row by row, Table 2's cell map and the mode table, on test_tables.py's
synthetic sweep (numbers worked out by hand from its runs), and a sweep whose baseline is not graded yet."""

from __future__ import annotations

from a2rl.reporting.aggregate import Sweeps
from a2rl.reporting.tables import HEADERS, heatmap, long_table, mode_table, paper_tables, pass_at_table
from test_tables import build_sweep, finish, make_sweep, write_noise


def test_long_table_rows_of_the_synthetic_sweep(tmp_path):
    t = long_table(Sweeps([build_sweep(tmp_path / "a")]))
    assert (t.title, t.name, t.headers) == ("results", "cells", HEADERS)
    cell = ["claude", "gpt-x"]
    assert {(r[0], r[3]): r for r in t.rows} == {
        # best 40 and 30 (seed 2 failed): 35 ± 5, 10 above the base model; 2 + 2 submissions, 2 + 1 valid
        ("gsm8k", "free"): ["gsm8k", *cell, "free", "tiny-llama", "paper"]
        + ["10.00", "35.00 ± 5.00", "+25.00", "4 (3 valid)", "2", "1"],
        # no valid submission (the base model's 10) and 16: 13 ± 3; seed 2 not finished
        ("gsm8k", "sft-only"): ["gsm8k", *cell, "sft-only", "tiny-llama", "paper"]
        + ["10.00", "13.00 ± 3.00", "+3.00", "2 (1 valid)", "2 (+1 unfinished)", "0"],
        # the baseline failed: a run without a valid submission has no score, so the cell has none
        ("humaneval", "free"): ["humaneval", *cell, "free", "tiny-llama", "paper"]
        + ["FAILED: judge down", "—", "—", "2 (2 valid)", "3", "0"],
        ("humaneval", "sft-only"): ["humaneval", *cell, "sft-only", "tiny-llama", "paper"]
        + ["FAILED: judge down", "—", "—", "0 (0 valid)", "0 (+3 unfinished)", "0"],
    }
    failed = next(d for d in t.data if (d["task"], d["mode"]) == ("humaneval", "free"))
    assert (failed["baseline_status"], failed["baseline_error"], failed["within_noise"]) == (
        "failed",
        "judge down",
        None,
    )
    ok = next(d for d in t.data if (d["task"], d["mode"]) == ("gsm8k", "free"))
    assert (ok["baseline_status"], ok["baseline_error"], ok["within_noise"]) == ("ok", None, None)  # no noise record


def test_a_baseline_not_graded_yet_is_pending(tmp_path):
    sw = Sweeps([make_sweep(tmp_path / "s", seeds=(0,), tasks=("gsm8k",), base_scores=())])
    t = long_table(sw)
    assert t.rows[0][6:] == ["pending", "—", "—", "0 (0 valid)", "0 (+1 unfinished)", "0"]
    assert (t.data[0]["baseline_status"], t.data[0]["baseline"], t.data[0]["improvement"]) == ("pending", None, None)
    (paper,) = paper_tables(sw)
    assert paper.rows[0] == ["base model", "pending"]


def test_paper_table_cells_point_at_their_cells_runs(tmp_path):
    """Table 2's (row, column) -> cell map (the HTML report links a cell to its runs), and its note."""
    (t,) = paper_tables(Sweeps([build_sweep(tmp_path / "a")]))
    assert [r[0] for r in t.rows] == ["base model", "claude / gpt-x [free]", "claude / gpt-x [sft-only]"]
    assert t.headers == ["stack / driver", "gsm8k", "humaneval"]
    key = ("tiny-llama", "{task}", "claude", "gpt-x", "{mode}", "paper")
    assert t.keys == {
        (row, col): tuple(k.format(task=task, mode=mode) for k in key)
        for row, mode in ((1, "free"), (2, "sft-only"))
        for col, task in ((1, "gsm8k"), (2, "humaneval"))
    }
    assert t.notes == [
        "cells: best score, mean ± SEM over seeds; (n=…) where seeds are missing or failed; — where no run made a "
        "valid submission"
    ]


def test_mode_table_rows_data_and_heatmap(tmp_path):
    """Improvements over the base model (10) by mode: free [30, 20], sft-only [0 (no valid submission), 6];
    humaneval's baseline failed: no improvement to tell."""
    sw = Sweeps([build_sweep(tmp_path / "a")])
    t = mode_table(sw)
    assert (t.title, t.name, t.headers) == (
        "improvement by mode",
        "by_mode",
        ["mode", "stack / driver", "gsm8k", "humaneval"],
    )
    assert t.rows == [
        ["free", "claude / gpt-x", "+25.00 ± 5.00 (n=2)", "—"],
        ["sft-only", "claude / gpt-x", "+3.00 ± 3.00 (n=2)", "—"],
    ]
    assert t.notes == ["cells: mean ± SEM over runs (n); — where no run of the stack made a valid submission"]
    none = {"improvement_mean": None, "improvement_sem": None, "improvement_n": 0}
    stack = {"agent": "claude", "driver": "gpt-x"}
    assert t.data == [
        {
            "mode": "free",
            **stack,
            "task": "gsm8k",
            "improvement_mean": 25.0,
            "improvement_sem": 5.0,
            "improvement_n": 2,
        },
        {"mode": "free", **stack, "task": "humaneval", **none},
        {
            "mode": "sft-only",
            **stack,
            "task": "gsm8k",
            "improvement_mean": 3.0,
            "improvement_sem": 3.0,
            "improvement_n": 2,
        },
        {"mode": "sft-only", **stack, "task": "humaneval", **none},
    ]
    assert heatmap(sw) == (
        ["free · claude / gpt-x", "sft-only · claude / gpt-x"],
        ["gsm8k", "humaneval"],
        [[25.0, None], [3.0, None]],
    )


def test_improvements_within_noise_are_marked_in_the_long_table_and_the_tidy_data(tmp_path):
    """Noise measured on both tasks (2 × sd = 6.5): gsm8k's +3 is within it, +25 is not; humaneval's cells have no
    improvement (its baseline failed), so no verdict either."""
    sweep = build_sweep(tmp_path / "a")
    for task in ("gsm8k", "humaneval"):
        write_noise(sweep, task)
    sw = Sweeps([sweep])
    t = long_table(sw)
    assert {(r[0], r[3]): r[8] for r in t.rows} == {
        ("gsm8k", "free"): "+25.00",
        ("gsm8k", "sft-only"): "+3.00~",
        ("humaneval", "free"): "—",
        ("humaneval", "sft-only"): "—",
    }
    verdicts = {(d["task"], d["mode"]): (d["improvement"], d["within_noise"]) for d in t.data}
    assert verdicts == {
        ("gsm8k", "free"): (25.0, False),
        ("gsm8k", "sft-only"): (3.0, True),
        ("humaneval", "free"): (None, None),
        ("humaneval", "sft-only"): (None, None),
    }
    (paper,) = paper_tables(sw)
    assert {(d["task"], d["mode"]): (d["baseline"], d["improvement"], d["within_noise"]) for d in paper.data} == {
        ("gsm8k", "free"): (10.0, 25.0, False),
        ("gsm8k", "sft-only"): (10.0, 3.0, True),
        ("humaneval", "free"): (None, None, None),
        ("humaneval", "sft-only"): (None, None, None),
    }


def test_cells_keep_the_spec_order_of_tasks_and_pass_at_k_names_its_columns(tmp_path):
    """Tasks listed humaneval first: rows follow that order, not the alphabet."""
    sweep = make_sweep(tmp_path / "s", seeds=(0,), tasks=("humaneval", "gsm8k"), base_scores=(("gsm8k", 10.0),))
    finish(sweep, "gsm8k", "free", 0, [(10, None, 30.0)])
    t = pass_at_table(Sweeps([sweep]), [1])
    assert [(r[1], r[4]) for r in t.rows] == [
        ("humaneval", "free"),
        ("humaneval", "sft-only"),
        ("gsm8k", "free"),
        ("gsm8k", "sft-only"),
    ]
    assert (t.title, t.name) == ("pass@k: expected best improvement over k runs", "pass_at")
    assert t.notes == ["— where the cell has fewer than k runs with a score, or no run of it made a valid submission"]
    assert [(d["task"], d["mode"], d["n"], d["pass_at_1"]) for d in t.data] == [
        ("humaneval", "free", 0, None),
        ("humaneval", "sft-only", 0, None),
        ("gsm8k", "free", 1, 20.0),
        ("gsm8k", "sft-only", 0, None),
    ]


def test_a_stack_run_on_fewer_tasks_has_empty_cells_in_table_2(tmp_path):
    """Two sweeps merged: the control agent ran gsm8k only, so its humaneval cell holds no data."""
    both = make_sweep(tmp_path / "a", seeds=(0,))
    control = make_sweep(tmp_path / "b", seeds=(0,), tasks=("gsm8k",), agents=("baseline",))
    (t,) = paper_tables(Sweeps([both, control]))
    assert t.headers == ["stack / driver", "gsm8k", "humaneval"]
    rows = {r[0]: r[1:] for r in t.rows}
    assert rows["baseline (control agent) / none [free]"] == ["—", "—"]  # gsm8k: no run done; humaneval: none ran
    row = list(rows).index("baseline (control agent) / none [free]")  # its index in t.rows (the base model's first)
    assert (row, 1) in t.keys and (row, 2) not in t.keys  # no humaneval cell to link


def test_a_protocols_block_has_only_the_tasks_run_under_it(tmp_path):
    """Merged sweeps: humaneval ran under `paper` only, so the `a2rl` block has no humaneval column."""
    paper = make_sweep(tmp_path / "a", seeds=(0,))
    a2rl = make_sweep(tmp_path / "b", seeds=(1,), tasks=("gsm8k",), protocols=("a2rl",))
    blocks = paper_tables(Sweeps([paper, a2rl]))
    assert [(t.title, t.headers) for t in blocks] == [
        ("Table 2: tiny-llama (protocol paper)", ["stack / driver", "gsm8k", "humaneval"]),
        ("Table 2: tiny-llama (protocol a2rl)", ["stack / driver", "gsm8k"]),
    ]
    assert blocks[1].rows[0] == ["base model", "5.00"]  # make_sweep's a2rl baseline: half the paper one
