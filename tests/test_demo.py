"""The README's demo sweep (configs/sweeps/demo.yaml), end to end with the real reference agent: TRL SFT then
GRPO on the tiny model, on the local executor (the session's `demo_sweep`: the demo as shipped, with two busy
loops competing for the cores, prints exactly the README's table) and on Slurm (a shorter training schedule keeps
it quick; the grid, task, model and machinery are the demo's own)."""

from __future__ import annotations

import csv
import io
import re

import pytest

from a2rl.store.results import RunResult
from a2rl.store.sweepdir import SweepDir
from conftest import REPO, a2rl, demo_spec, slurm_available


def table_lines(text: str) -> list[str]:
    """The results table in `text` (the README, or what `launch --wait` printed): its header, rule and rows."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(r"^task +agent +driver ", line))
    end = next((i for i in range(start + 2, len(lines)) if not lines[i].startswith("arith ")), len(lines))
    return lines[start:end]


def check_demo(sweep: SweepDir) -> None:
    results = [RunResult.load(sweep.result_path(r.run_id)) for r in sweep.runs()]
    assert len(results) == 4 and all(r.status == "ok" for r in results), [r.failure_reason for r in results]
    for r in results:
        assert r.baseline is not None
        if r.agent == "pipeline":
            assert r.submissions == r.valid_submissions == 2  # after SFT and after GRPO
            assert r.best > r.baseline, r  # the agent improved the model on the held-out split
        else:
            assert r.submissions == 0 and r.best is None
    table = a2rl("aggregate", str(sweep.root), "--format", "csv", check=True).stdout
    rows = {row["agent"]: row for row in csv.DictReader(io.StringIO(table))}
    control = rows["baseline (control agent)"]
    assert control["mean"] == "" and (control["submissions"], control["valid"]) == ("0", "0")
    assert float(rows["pipeline"]["improvement"]) > 0
    for fmt in ("github", "latex", "simple"):
        assert "pipeline" in a2rl("aggregate", str(sweep.root), "--format", fmt, check=True).stdout


@pytest.mark.slow
def test_demo_sweep_improves_the_model_locally(demo_sweep):
    proc, root = demo_sweep
    assert "4/4 done" in proc.stdout and "best arith/pipeline" in proc.stdout
    sweep = SweepDir(root)
    for run in sweep.runs():  # the follower's line for each run as it ended
        assert re.search(rf"^{run.run_id}: ok · best .* submissions? \(\d+ valid\)$", proc.stdout, re.M), run.run_id
    check_demo(sweep)
    # the same table on any machine: the reference agent's schedule is fixed and seeded, the budget only a cap
    assert table_lines(proc.stdout) == table_lines((REPO / "README.md").read_text()), proc.stdout[-3000:]


@pytest.mark.sidebyside
@pytest.mark.slow
@pytest.mark.slurm
def test_demo_sweep_on_slurm(tmp_path):
    if not slurm_available():
        pytest.skip("no Slurm cluster")
    spec = demo_spec(tmp_path, executor="slurm", cluster="local", resources={"cpus": 1, "mem_gb": 4, "gpus": 1})
    proc = a2rl("launch", str(spec), "--sweep-dir", str(tmp_path / "sd"), "--wait", timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    sweep = SweepDir(tmp_path / "sd")
    jobs = {sweep.status(r.run_id).job_id.split("_")[0] for r in sweep.runs()}
    assert len(jobs) == 1  # one job array
    check_demo(sweep)
