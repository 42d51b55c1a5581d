"""`a2rl calibrate`: the same weights graded K times by the real grader, into a signed NoiseRecord per (task,
model) that the tables read; judge tasks by default, others when named."""

from __future__ import annotations

import math
import shutil
import sys

import pytest

from a2rl.grading.calibrate import calibrate
from a2rl.grading.daemon import GradingDaemon
from a2rl.run.budget import Budget
from a2rl.run.submit import RunSubmitter
from a2rl.run.workspace import create_workspace
from a2rl.scheduling.launcher import open_sweep
from a2rl.spec.tasks import get_task
from a2rl.store.noise import NoiseRecord, noise_path
from a2rl.store.results import write_result
from a2rl.tasklib.prepare import ensure_prepared
from conftest import FIXTURES, REPO, a2rl, write_sweep

sys.path.insert(0, str(FIXTURES / "agents"))
from variants import make_variant  # noqa: E402


def test_sd_is_pooled_over_each_set_of_weights():
    rec = NoiseRecord(
        task="t",
        model="m",
        protocol="paper",
        evaluator_version=1,
        repeats=3,
        measured_at=0.0,
        scores={"baseline": [1.0, 2.0, 3.0], "r.0001": [50.0, 52.0, 54.0], "r.0002": [7.0]},
    )
    # squares about each mean: 2 + 8 over 2 + 2 degrees of freedom; the level of each set does not count
    assert rec.sd == pytest.approx(math.sqrt(10 / 4))
    assert rec.within(2 * rec.sd) and not rec.within(-2 * rec.sd - 0.01)


@pytest.fixture
def graded(tmp_path, tiny_model):
    """A finished run on the echo task whose best submission (score 40) was kept by the grader."""
    sweep, (spec,) = open_sweep(
        write_sweep(tmp_path, grader={"poll_s": 0.05, "lease_s": 5, "keep_artifacts": True}), tmp_path / "sd"
    )
    task = get_task("echo", [FIXTURES / "tasks"])
    ws = create_workspace(
        sweep.workspace(spec.run_id),
        task=task,
        data=ensure_prepared(task, sweep.data_root()),
        model_dir=tiny_model,
        budget_s=60,
        source_tree=REPO,
    )
    make_variant(tiny_model, ws.output / "v", score=40.0, salt=1)
    RunSubmitter(sweep, spec, ws, Budget(60)).submit("output/v", wait=False)
    grader = GradingDaemon(sweep)
    grader.grade(sweep.queue.claim(grader.holder, 60, sweep.ledger.has))
    write_result(
        sweep,
        spec.run_id,
        status="ok",
        failure_reason=None,
        agent_exit_code=0,
        agent_seconds=1.0,
        started_at=0.0,
        ended_at=1.0,
    )
    return sweep


def test_named_tasks_are_graded_k_times_with_the_best_submissions(graded):
    said = []
    (rec,) = calibrate(graded, 3, tasks=["echo"], best=True, say=said.append)
    (run,) = graded.runs()
    assert rec.scores == {"baseline": [0.0, 0.0, 0.0], f"{run.run_id}.0001": [40.0, 40.0, 40.0]}
    assert NoiseRecord.load_verified(noise_path(graded, "echo", "tiny-llama", "paper"), graded.key).scores == rec.scores
    assert rec.sd == 0.0 and any("sd 0.00 over 3 gradings" in line for line in said)


def test_rule_tasks_are_skipped_by_default_and_lost_weights_are_named(graded):
    said = []
    assert calibrate(graded, 2, say=said.append) == []
    assert said == ["echo / tiny-llama: not calibrated (rule task, greedy decoding: its grading is deterministic)"]
    assert not noise_path(graded, "echo", "tiny-llama", "paper").exists()
    for d in graded.submissions.iterdir():
        shutil.rmtree(d)
    said.clear()
    (rec,) = calibrate(graded, 2, tasks=["echo"], best=True, say=said.append)
    assert list(rec.scores) == ["baseline"] and any(
        "not re-graded" in line and "keep_artifacts" in line for line in said
    )


@pytest.mark.slow  # a subprocess that loads the grader's stack
def test_command_line(graded):
    out = a2rl("calibrate", str(graded.root), "--repeats", "2", "--tasks", "echo", check=True)
    assert "echo / tiny-llama / baseline: 0.00, 0.00" in out.stdout
    bad = a2rl("calibrate", str(graded.root), "--repeats", "1")
    assert bad.returncode == 2 and bad.stderr.strip() == "error: --repeats must be 2 or more to measure noise, got 1"
    bad = a2rl("calibrate", str(graded.root), "--tasks", "nope")
    assert bad.returncode == 2 and "no task 'nope'" in bad.stderr
