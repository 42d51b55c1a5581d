"""The Python API (issue 34): `import a2rl` is cheap; `a2rl.open_sweep` gives DataFrames of the same numbers as
the tidy exports; `a2rl.validate` and `a2rl.launch` return objects; docs/analyses.md's example runs as written."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import a2rl
from a2rl.errors import SpecError
from a2rl.scheduling.launcher import open_sweep
from a2rl.store.results import mark_lost
from conftest import REPO, write_sweep
from test_tables import build_sweep, finish, make_sweep

# The sweeps docs/analyses.md's example loads, by their path in the example. Built here from test_tables.py's
# synthetic records; a committed fixture sweep (tests/fixtures/sweeps/) can be copied to these paths instead.
EXAMPLE = REPO / "docs" / "analyses.md"


def example_sweeps(cwd: Path) -> None:
    gsm8k = make_sweep(cwd / "sweeps" / "gsm8k", seeds=(0, 1), tasks=("gsm8k",))  # baseline 10
    finish(gsm8k, "gsm8k", "free", 0, [(20, None, 30.0)])
    finish(gsm8k, "gsm8k", "free", 1, [(20, None, 20.0)])
    humaneval = make_sweep(
        cwd / "sweeps" / "humaneval", seeds=(0, 1), tasks=("humaneval",), base_scores=[("humaneval", 40.0)]
    )
    finish(humaneval, "humaneval", "free", 0, [(20, None, 45.0)])
    finish(humaneval, "humaneval", "sft-only", 0, [(20, None, 43.0)])


def test_import_a2rl_loads_only_its_version():
    code = "import sys, a2rl; print(a2rl.__version__, sorted(m for m in sys.modules if m.startswith('a2rl')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split(" ", 1)
    assert out[0] == a2rl.version.__version__ and out[1].strip() == "['a2rl', 'a2rl.version']"
    assert a2rl.open_sweep is a2rl.api.open_sweep  # the API on first use
    with pytest.raises(AttributeError, match="module 'a2rl' has no attribute 'opensweep'"):
        a2rl.opensweep  # noqa: B018


def test_a_sweep_as_dataframes(tmp_path):
    sweep = a2rl.open_sweep(build_sweep(tmp_path / "a").root)
    cells = sweep.cells().set_index(["task", "mode"])
    assert cells["mean"].dtype == "float64" and cells["submissions"].dtype == "int64"
    assert (cells.loc[("gsm8k", "free"), "mean"], cells.loc[("gsm8k", "free"), "improvement"]) == (35.0, 25.0)
    runs = sweep.runs()
    assert len(runs) == 12 and set(runs["status"]) == {"ok", "failed", "unfinished"}
    assert runs["score"].dtype == "float64" and runs.loc[runs["score"].notna(), "score"].max() == 70.0
    subs = sweep.submissions()
    assert len(subs) == 8 and subs["valid"].sum() == 6 and list(subs.columns[:2]) == ["run_id", "model"]
    assert list(sweep.tables(by="mode", usage=True)) == ["by_mode", "usage"] and sweep.problems == []
    with pytest.raises(SpecError, match="not a sweep directory"):
        a2rl.open_sweep(tmp_path)


def test_this_releases_fixture_sweep_and_the_one_before_give_the_same_frames(tmp_path):
    """tests/fixtures/sweeps/: the same sweep written by a2rl 1.0 and by the release before (read through its
    upgrade steps) is the same data; only what the runs' timing and processes left differs."""
    fixtures = REPO / "tests" / "fixtures" / "sweeps"
    new, old = (shutil.copytree(fixtures / name, tmp_path / name) for name in ("1.0", "pre-1.0"))
    new, old = a2rl.open_sweep(new), a2rl.open_sweep(old)
    assert new.cells().equals(old.cells()) and len(new.cells()) == 2
    assert new.cells()["sem"].dtype == "float64"  # no sem at n = 1: NaN, as read_csv reads the empty column
    runs_new, runs_old = new.runs(), old.runs()
    assert runs_new.drop(columns="failure_reason").equals(runs_old.drop(columns="failure_reason"))
    assert list(runs_new["status"]) == ["ok", "failed"] and runs_new["submissions"].tolist() == [2, 0]
    assert new.submissions().drop(columns="budget_s").equals(old.submissions().drop(columns="budget_s"))
    assert new.problems == old.problems == []


def test_without_pandas_the_frames_say_what_to_install(tmp_path, monkeypatch):
    sweep = a2rl.open_sweep(build_sweep(tmp_path / "a").root)
    monkeypatch.setitem(sys.modules, "pandas", None)  # as where it is not installed
    with pytest.raises(ImportError, match=r"^a2rl's DataFrames need pandas: pip install 'a2rl\[analysis\]'"):
        sweep.cells()


def test_validate_returns_what_the_command_prints(tmp_path):
    path = write_sweep(tmp_path, models=["/does/not/exist"])
    line = "models[0].path: model directory '/does/not/exist' does not exist"
    v = a2rl.validate(path)
    assert not v.ok and line in v.refused and v.errors == [] and len(v.runs) == 1 and v.spec.name == "t"
    assert a2rl.validate(path, elsewhere=True).ok
    bad = a2rl.validate(write_sweep(tmp_path, name="bad", tasks=["nosuch"]))
    assert not bad.ok and bad.spec is None and any("tasks[0]: unknown task 'nosuch'" in e for e in bad.errors)


def test_launch_raises_what_the_command_refuses(tmp_path):
    with pytest.raises(SpecError, match=re.escape("models[0].path: model directory '/does/not/exist'")):
        a2rl.launch(write_sweep(tmp_path, models=["/does/not/exist"]), sweep_dir=tmp_path / "sd")
    assert not (tmp_path / "sd").exists()


def test_launch_hands_the_launcher_its_arguments_and_raises_a_leak_refusal(tmp_path, monkeypatch):
    """The launcher itself runs in the slow test below; here, what launch() asks of it (a local stand-in)."""
    from a2rl import api

    calls, follows, refused = [], [], []

    class Launcher:
        def follow(self, progress_s):
            follows.append(progress_s)

    def launch(path, **kw):
        calls.append((path, kw))
        return SimpleNamespace(refused=bool(refused), audit=SimpleNamespace(isolation="none"), launcher=Launcher())

    monkeypatch.setattr(api.Launcher, "launch", staticmethod(launch))
    a2rl.launch("s.yaml")
    flags = {"executor": None, "retry_failed": False, "allow_leaks": False}
    assert calls.pop() == (Path("s.yaml"), {"sweep_dir": None, **flags, "follow": False}) and follows == []
    a2rl.launch("s.yaml", wait=True)
    assert calls.pop()[1]["follow"] is True and follows.pop() == 30.0
    flags = {"executor": "local", "retry_failed": True, "allow_leaks": True}
    a2rl.launch("s.yaml", sweep_dir="d", **flags, wait=True, progress_s=5.0)
    (path, kw), *_ = calls
    assert kw == {"sweep_dir": Path("d"), **flags, "follow": True} and isinstance(kw["sweep_dir"], Path)
    assert follows == [5.0]
    refused.append(True)
    with pytest.raises(SpecError) as e:
        a2rl.launch("s.yaml")
    assert e.value.lines == [
        "the audit found a path to held-out data under isolation: none; use a sandbox, or launch with allow_leaks=True"
    ]
    with pytest.raises(SpecError) as e:
        a2rl.open_sweep()
    assert e.value.lines == ["open_sweep needs at least one sweep directory"]
    mixed = api._frame([{"a": 1, "b": None}, {"a": "x", "b": None}])  # a column of mixed values stays as it is
    assert list(mixed["a"]) == [1, "x"] and mixed["b"].dtype == "float64"


@pytest.mark.slow  # a launch prepares what its runs share and audits the sandbox (~25 s here)
def test_launch_returns_the_launch(tmp_path):
    """Launched again when every run has ended (here: failed, lost), the real launch path submits nothing."""
    sweep, runs = open_sweep(write_sweep(tmp_path), tmp_path / "sd")
    mark_lost(sweep, runs[0], "lost in a test")
    done = a2rl.launch(sweep.root, wait=True)
    assert done.finished and done.sweep.root == sweep.root and [r.run_id for r in done.runs] == [runs[0].run_id]
    assert list(a2rl.open_sweep(sweep.root).runs()["status"]) == ["failed"]


def example_code() -> str:
    """The Python block of docs/analyses.md's "From Python" section, as written."""
    section = EXAMPLE.read_text().split("## From Python", 1)[1]
    return re.search(r"^```python\n(.*?)^```", section, re.M | re.S).group(1)


def test_the_docs_example_runs(tmp_path, monkeypatch):
    example_sweeps(tmp_path)
    monkeypatch.chdir(tmp_path)
    ns: dict = {}
    exec(compile(example_code(), str(EXAMPLE), "exec"), ns)
    per_task = ns["per_task"]
    assert per_task.loc["gsm8k", "claude"] == 15.0  # (30 + 20) / 2 − 10
    assert per_task.loc["humaneval", "claude"] == pytest.approx(4.0)  # free +5, sft-only +3: mean over modes
    assert (tmp_path / "improvement.png").stat().st_size > 5000
    assert json.dumps(ns["cells"]["improvement"].tolist())  # numbers, not strings
    assert not os.environ.get("DISPLAY") or ns["matplotlib"].get_backend().lower() == "agg"
