"""`a2rl aggregate --format csv|json|parquet` write tidy data (issue 34): a row per cell, run or submission,
numbers where the display formats show "35.00 ± 5.00", empty where there is none; one table per file or JSON
key. On test_tables.py's synthetic sweep, whose numbers are known."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pandas as pd
import pytest

from a2rl.errors import SpecError
from a2rl.reporting.aggregate import Sweeps, export, format_tables, main_tables, notes, tables, tidy
from test_tables import build_sweep

EVERY = dict(
    layout="paper", by="mode", pass_at=[1, 2], scaling=True, routes=True, failures=True, usage=True, submissions=True
)


@pytest.fixture
def sw(tmp_path) -> Sweeps:
    return Sweeps([build_sweep(tmp_path / "a")])


def test_csv_is_numbers_a_row_per_cell(sw):
    cells = pd.read_csv(io.StringIO(format_tables(sw, main_tables(sw), "csv")))
    for column in ("baseline", "mean", "sem", "improvement"):
        assert cells[column].dtype == "float64", column
    for column in ("n", "submissions", "valid", "runs", "runs_ok", "runs_failed", "runs_unfinished"):
        assert cells[column].dtype == "int64", column
    free = cells.set_index(["task", "mode"]).loc["gsm8k", "free"]
    assert (free["baseline"], free["mean"], free["sem"], free["n"], free["improvement"]) == (10, 35, 5, 2, 25)
    assert (free["submissions"], free["valid"], free["runs_ok"], free["runs_failed"]) == (4, 3, 2, 1)
    sft = cells.set_index(["task", "mode"]).loc["gsm8k", "sft-only"]
    assert (sft["mean"], sft["improvement"], sft["runs_unfinished"]) == (13, 3, 1)
    failed_base = cells.set_index(["task", "mode"]).loc["humaneval", "free"]
    assert failed_base["baseline_status"] == "failed" and failed_base["baseline_error"] == "judge down"
    assert pd.isna(failed_base["baseline"]) and pd.isna(failed_base["improvement"])  # none: empty, not "—"


def test_json_holds_every_table_by_name_and_round_trips(sw):
    ts = tables(sw, **EVERY, per_run=True)
    doc = json.loads(format_tables(sw, ts, "json"))
    assert list(doc["tables"]) == [
        "paper",
        "by_mode",
        "pass_at",
        "scaling",
        "routes",
        "failures",
        "usage",
        "submissions",
        "runs",
    ]
    assert doc["tables"] == json.loads(json.dumps(tidy(ts)))  # nothing lost or turned into text
    paper = {(r["task"], r["mode"]): r for r in doc["tables"]["paper"]}
    assert (paper["gsm8k", "free"]["mean"], paper["gsm8k", "free"]["sem"]) == (35.0, 5.0)
    assert paper["humaneval", "sft-only"]["mean"] is None and paper["humaneval", "sft-only"]["n"] == 0
    mode = {(r["mode"], r["task"]): r for r in doc["tables"]["by_mode"]}
    assert (mode["free", "gsm8k"]["improvement_mean"], mode["free", "gsm8k"]["improvement_n"]) == (25.0, 2)
    assert doc["tables"]["pass_at"][0]["pass_at_1"] == 25.0
    usage = {(r["task"], r["mode"]): r for r in doc["tables"]["usage"]}
    assert (usage["gsm8k", "free"]["tokens"], usage["gsm8k", "free"]["cost"]) == (205_000, 2.0)
    # a row per graded submission (8 in all), and per run (12: 2 tasks × 2 modes × 3 seeds)
    subs = doc["tables"]["submissions"]
    assert len(subs) == 8 and [s["score"] for s in subs[:2]] == [20.0, 40.0] and subs[2]["valid"] is False
    runs = {(r["task"], r["mode"], r["seed"]): r for r in doc["tables"]["runs"]}
    assert (
        len(runs) == 12 and runs["gsm8k", "free", 2]["status"] == "failed" and runs["gsm8k", "free", 2]["score"] is None
    )
    assert runs["gsm8k", "sft-only", 2]["status"] == "unfinished"
    assert (runs["gsm8k", "free", 0]["improvement"], runs["gsm8k", "free", 0]["tokens"]) == (30.0, 5000)
    scaling = [r for r in doc["tables"]["scaling"] if (r["task"], r["mode"]) == ("gsm8k", "free")]
    assert [(r["at"], r["point"], r["mean"]) for r in scaling][:4] == [
        ("budget", 0.25, 15.0),
        ("budget", 0.5, 15.0),
        ("budget", 0.75, 25.0),
        ("budget", 1.0, 35.0),
    ]
    assert [(r["at"], r["point"], r["sem"], r["n"]) for r in scaling][4] == ("tokens", 10_000, 15.0, 2)


def test_several_tables_go_to_a_folder_one_file_each(sw, tmp_path):
    ts = tables(sw, **EVERY)
    with pytest.raises(SpecError, match=r"8 tables \(paper, by_mode, .*\) need --out DIR"):
        export(sw, ts, "csv")
    written = export(sw, ts, "csv", tmp_path / "csv").splitlines()
    assert [p.rsplit("/", 1)[1] for p in written][:2] == ["paper.csv", "by_mode.csv"]
    assert pd.read_csv(tmp_path / "csv" / "pass_at.csv")["pass_at_1"].dtype == "float64"
    export(sw, ts, "json", tmp_path / "json")
    assert json.loads((tmp_path / "json" / "usage.json").read_text()) == json.loads(json.dumps(tidy(ts)["usage"]))


def test_parquet_needs_a_folder_and_pyarrow(sw, tmp_path, monkeypatch):
    ts = tables(sw, per_run=True)
    with pytest.raises(SpecError, match="parquet need --out DIR"):
        export(sw, ts, "parquet")
    export(sw, ts, "parquet", tmp_path / "pq")
    runs = pd.read_parquet(tmp_path / "pq" / "runs.parquet")
    assert runs["score"].dtype == "float64" and runs["seed"].dtype == "int64" and len(runs) == 12
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as where it is not installed
    with pytest.raises(SpecError, match="--format parquet needs pyarrow: pip install pyarrow"):
        export(sw, ts, "parquet", tmp_path / "none")


def test_the_exported_text_is_pinned(sw, tmp_path, monkeypatch):
    """The bytes written, not only what they parse to: JSON indented by one, the notes and flags beside the
    tables, CSV lines ending in \\n (never \\r\\n) and no trailing newline on stdout, a folder made with its
    parents and written again in place."""
    ts = tables(sw, per_run=True)
    text = export(sw, ts, "json")
    doc = {"tables": tidy(ts), "notes": notes(sw), "untrusted": sw.untrusted, "foreign": sw.foreign}
    assert text == json.dumps(json.loads(json.dumps(doc)), indent=1)
    one = export(sw, main_tables(sw), "csv")
    assert (
        "\r" not in one
        and not one.endswith("\n")
        and one.count("\n") == len(next(iter(tidy(main_tables(sw)).values())))
    )
    out = tmp_path / "out" / "json"  # (tmp_path / "a" is the sweep)
    for _ in range(2):
        written = export(sw, ts, "json", out).splitlines()
    for path in written:
        name = Path(path).stem
        assert Path(path).read_text() == json.dumps(json.loads(json.dumps(tidy(ts)[name])), indent=1) + "\n"
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(SpecError) as e:
        export(sw, ts, "parquet", tmp_path / "none")
    assert e.value.lines == ["--format parquet needs pyarrow: pip install pyarrow, or use --format csv or json"]


def test_display_formats_keep_their_strings(sw):
    text = format_tables(sw, main_tables(sw), "github")
    assert "35.00 ± 5.00" in text and "4 (3 valid)" in text and "—" in text
