"""The fast paths behind issue 14's speed goals (tools/bench/aggregate.py measures them) change no output: records
load in one pass (model_validate_json) and word every error as before; `a2rl aggregate` imports no plotting or ML
library; the cell plots, drawn over a frame kept per budget, scale as matplotlib's autoscaling would and do not
depend on the cells drawn before them."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from a2rl import records
from a2rl.records import Record, RecordError
from a2rl.store.results import AgentUsage, RunResult
from conftest import a2rl
from test_tables import sweep  # noqa: F401 (the fixture: the synthetic sweep with known numbers)

ALL_TABLES = [
    "--layout",
    "paper",
    "--by",
    "mode",
    "--pass-at",
    "1,2",
    "--scaling",
    "--routes",
    "--failures",
    "--usage",
    "--submissions",
]
GOLDEN = Path(__file__).parent / "fixtures" / "report_speed" / "all_tables.txt"


def test_every_table_reads_as_before_the_fast_paths(sweep):  # noqa: F811
    """The text of every table kind for test_tables' sweep, as printed by a2rl before the fast paths (commit
        8667571 wrote the fixture; the scaling table's three submission-count columns were added to it since, then
        the mode table's stack column and the notes on — (issue 25), then Table 2's "base model" row and the notes on
    a control's — (issue 35), and nothing else changed)."""
    assert a2rl("aggregate", str(sweep.root), *ALL_TABLES, check=True).stdout == GOLDEN.read_text()


def test_every_table_reads_the_same_when_the_records_are_read_side_by_side(sweep, monkeypatch, capsys):  # noqa: F811
    """As on a shared file system, where read_many finds the files slow and reads them in threads."""
    from a2rl.cli.aggregate import main

    monkeypatch.setattr(records, "SLOW_READ_S", 0.0)
    assert main([str(sweep.root), *ALL_TABLES]) == 0
    assert capsys.readouterr().out == GOLDEN.read_text()


@pytest.mark.parametrize("slow", [False, True], ids=["page-cache", "shared-fs"])
def test_read_many_gives_each_files_bytes_or_error_in_order(tmp_path, monkeypatch, slow):
    """One thread while the files come fast, threads past the probe when they come slowly; the same answer."""
    monkeypatch.setattr(records, "SLOW_READ_S", 0.0 if slow else float("inf"))
    readers, read_bytes = set(), records.read_bytes

    def spy(path):
        readers.add(threading.get_ident())
        return read_bytes(path)

    monkeypatch.setattr(records, "read_bytes", spy)
    paths = [tmp_path / f"{i}.json" for i in range(100)]
    for i, path in enumerate(paths):
        if i % 7:
            path.write_text(f"x{i}")
    out = records.read_many(paths, threads=4, probe=10)
    assert [o if isinstance(o, bytes) else type(o) for o in out] == [
        f"x{i}".encode() if i % 7 else FileNotFoundError for i in range(100)
    ]
    assert (len(readers) > 1) == slow
    assert Note.load_or_none(paths[0], out[0]) is None  # a missing file read ahead loads as None, as when not
    with pytest.raises(RecordError, match=f"cannot read Note from {paths[1]}"):
        Note.load(paths[1], out[1])


def test_aggregate_imports_no_plotting_or_ml_library(sweep):  # noqa: F811
    """Their imports would cost `a2rl aggregate` a second or more of its 3."""
    heavy = ("matplotlib", "numpy", "torch", "pandas", "sklearn", "transformers", "PIL")
    code = (
        "import sys; from a2rl.cli import main; main(['aggregate', *sys.argv[1:]]); "
        f"print(sorted(m for m in {heavy!r} if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(sweep.root), *ALL_TABLES], capture_output=True, text=True, check=True
    ).stdout
    assert out.splitlines()[-1] == "[]"


class Note(Record):
    text: str
    at: float = 0.0


V = json.dumps(Note.SCHEMA)


@pytest.mark.parametrize(
    "content, error",
    [
        ('{"schema_version": %s, "text": "hi"' % V, "cannot read Note from"),
        ('{"text": "hi"}', "Note schema_version None is not a record version"),
        ('{"schema_version": 1, "text": "hi"}', "Note version 1 is older than any a2rl 1.x reads"),
        ('{"schema_version": %s, "text": 3}' % V, "not a valid Note: 1 validation error for Note"),
        ('{"schema_version": %s, "text": "hi", "x": 1}' % V, "not a valid Note: 1 validation error for Note"),
        ("[2]", "not a Note \\(a JSON list, not an object\\)"),
    ],
)
def test_a_record_that_does_not_load_says_why(tmp_path, content, error):
    path = tmp_path / "note.json"
    path.write_text(content)
    with pytest.raises(RecordError, match=error):
        Note.load(path)


def test_a_non_utf8_record_does_not_load(tmp_path):
    path = tmp_path / "note.json"
    path.write_bytes(b'{"schema_version": %s, "text": "\xff"}' % V.encode())
    with pytest.raises(RecordError, match="cannot read Note from"):
        Note.load(path)


def test_a_record_loads_as_its_parsed_json_validates_and_still_verifies(tmp_path):
    """Floats, big integers, None and nested models come back exactly, so the signature still verifies."""
    result = RunResult(
        run_id="r",
        task="gsm8k",
        protocol="paper",
        agent="claude",
        driver="d",
        model="m",
        seed=3,
        status="ok",
        baseline=1 / 3,
        best=0.1 + 0.2,
        improvement=1e-17,
        submissions=2,
        valid_submissions=1,
        scores=[None, 2.5e-300],
        submitted_budget_s=[1e21, None],
        submitted_tokens=[2**62, None],
        budget_s=36000,
        started_at=0,
        ended_at=1.5,
        usage=AgentUsage(parser="claude", input_tokens=10**15, cost_usd=1e-9),
    )
    path, key = tmp_path / "result.json", b"k" * 32
    result.sign(key).dump(path)
    written = result.model_copy(update={"schema_version": RunResult.SCHEMA})
    assert RunResult.load(path) == RunResult.model_validate(json.loads(path.read_text())) == written
    assert RunResult.load_verified(path, key) == written


CELLS = [
    ("a", 100.0, 10.0, [(0, [(20.0, 30.0), (60.0, 25.0)]), (1, [(50.0, 5.0)])]),
    ("b", 50.0, None, [(0, [(5.0, 3.0)]), (1, [(7.0, 1.0)])]),
    ("one value", 100.0, None, [(0, [(5.0, 3.0)])]),
    ("zero", 100.0, 0.0, [(0, [(5.0, 0.0)])]),
    ("baseline only", 100.0, 10.0, []),
    ("nothing", 100.0, None, []),
    ("many", 100.0, 2.0, [(s, [(10.0 * s, float(s))]) for s in range(9)]),
]


def test_cell_plots_scale_as_matplotlib_autoscaling_would(tmp_path, monkeypatch):
    import matplotlib.image

    from a2rl.reporting import html

    plt = html._plt()
    seen = []
    monkeypatch.setattr(matplotlib.image, "imsave", lambda *a, **k: seen.append(plt.gcf().axes[0].get_ylim()))
    html.plot_cells([(cell, str(tmp_path / f"{i}.png")) for i, cell in enumerate(CELLS)])
    assert len(seen) == len(CELLS)
    for (_, budget, base, series), ylim in zip(CELLS, seen):
        fig, ax = plt.subplots()
        for _, pts in series:
            ax.plot(*zip(*pts), "o")
        if base is not None:
            ax.axhline(base)
        ax.set_xlim(0, budget)
        assert ylim == pytest.approx(ax.get_ylim(), abs=1e-12)
        plt.close(fig)


def test_a_cells_plot_does_not_depend_on_the_cells_drawn_before_it(tmp_path):
    from a2rl.reporting import html

    (tmp_path / "alone").mkdir()
    html.plot_cells([(cell, str(tmp_path / f"{i}.png")) for i, cell in enumerate(CELLS + CELLS[:2])])
    for i, cell in enumerate(CELLS):
        html.plot_cells([(cell, str(tmp_path / "alone" / "p.png"))])
        assert (tmp_path / f"{i}.png").read_bytes() == (tmp_path / "alone" / "p.png").read_bytes(), cell[0]
    assert [(tmp_path / f"{i}.png").read_bytes() for i in (0, 1)] == [
        (tmp_path / f"{i}.png").read_bytes() for i in (len(CELLS), len(CELLS) + 1)
    ]


def test_only_a_missing_record_loads_as_none(tmp_path):
    (tmp_path / "file").write_text("x")
    assert Note.load_or_none(tmp_path / "none.json") is None
    assert Note.load_or_none(tmp_path / "file" / "note.json") is None  # under a file: not there either
    (tmp_path / "note.json").write_text('{"schema_version": 1, "text": "hi"}')
    with pytest.raises(RecordError, match="Note version 1 is older"):
        Note.load_or_none(tmp_path / "note.json")
    (tmp_path / "dir.json").mkdir()
    with pytest.raises(RecordError, match="cannot read Note from"):
        Note.load_or_none(tmp_path / "dir.json")
    key = b"k" * 32
    assert RunResult.load_verified_or_none(tmp_path / "none.json", key) is None
