"""configs/sweeps/offline-levels.yaml end to end: its L2 and L3 offline tasks (localjudge, textworld) in one sweep
with the reference agent and the baseline control, through the launcher on the local executor. Its L1 task, arith,
is left out here: the session's demo sweep (configs/sweeps/demo.yaml, tests/test_demo.py) runs the same reference
agent on the same schedule on arith through the same launcher and checks it beats the base model on both seeds.
Every task gets a baseline and graded submissions; the pipeline wins held-out TextWorld games, which the base model
never does. A shorter schedule and action budget keep it quick, and so does
preparing textworld from a source: tests/fixtures/textworld-games.tar.xz holds the 64 games one `a2rl prepare
textworld` generated with tw-make 1.7.0 (48 train games by public seed, 16 held-out ones from its secret seed),
given to `a2rl prepare --source` as an air-gapped site gives games made elsewhere (tw-make takes 4-15 min here)."""

from __future__ import annotations

import tarfile

import pytest
import yaml

from a2rl.store.results import RunResult
from a2rl.store.sweepdir import SweepDir
from conftest import DEMO_SHORT, FIXTURES, REPO, a2rl


@pytest.mark.sidebyside
@pytest.mark.slow
def test_offline_tasks_of_every_level_in_one_sweep(tmp_path):
    spec = yaml.safe_load((REPO / "configs" / "sweeps" / "offline-levels.yaml").read_text())
    assert spec["tasks"] == ["arith", "localjudge", "textworld"]
    spec["tasks"] = ["localjudge", "textworld"]
    spec["agents"] = [{"name": "pipeline", "args": DEMO_SHORT}, "baseline"]
    # Coin Collector games take at most 6 actions; 12 keeps grading an untrained model short
    spec["grader"]["task_options"] = {"textworld": {"max_steps": 12}}
    with tarfile.open(FIXTURES / "textworld-games.tar.xz") as tar:
        tar.extractall(tmp_path, filter="data")
    data = tmp_path / "data"
    a2rl("prepare", "textworld", "--data-root", str(data), "--source", str(tmp_path / "textworld-games"), check=True)
    games = sorted((data / "textworld" / "heldout" / "games").glob("*.z8"))  # the source's, not new secret ones
    assert len(games) == 16 and all(
        g.read_bytes() == (tmp_path / "textworld-games" / g.name).read_bytes() for g in games
    )
    spec["data_root"] = str(data)
    path = tmp_path / "levels.yaml"
    path.write_text(yaml.safe_dump(spec))
    proc = a2rl("launch", str(path), "--sweep-dir", str(tmp_path / "sd"), "--wait", timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    sweep = SweepDir(tmp_path / "sd")
    results = {(r.task, r.agent): r for r in (RunResult.load(sweep.result_path(run.run_id)) for run in sweep.runs())}
    assert len(results) == 4 and all(r.status == "ok" for r in results.values()), {
        k: r.failure_reason for k, r in results.items()
    }
    for task in ("localjudge", "textworld"):
        pipeline, control = results[task, "pipeline"], results[task, "baseline"]
        assert pipeline.baseline is not None and pipeline.baseline == control.baseline
        assert pipeline.submissions == pipeline.valid_submissions >= 1 and control.submissions == 0
        assert all(s is not None for s in pipeline.scores)
    tw = results["textworld", "pipeline"]
    assert tw.baseline == 0.0 and tw.best > 0.0, tw  # held-out games won after training, none before
    # the interactive route: SFT on the expert trajectories, then GRPO on its own rollouts in the real games
    log = (sweep.run_dir(tw.run_id) / "agent.log").read_text()
    assert "interactive task: 48 trajectories" in log and "policy rollouts on " in log, log[-3000:]
    assert results["localjudge", "pipeline"].submissions == 1  # SFT only: no rule reward stands in for a judge
    table = a2rl("aggregate", str(sweep.root), check=True).stdout
    assert all(t in table for t in ("localjudge", "textworld"))
