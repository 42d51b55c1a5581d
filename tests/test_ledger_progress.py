"""Each ledger entry records the budget clock and the agent's tokens and cost at submission (issue 14: what the
scaling analyses need), copied by the grader from the job's signed queue entry."""

from __future__ import annotations

import pytest

import a2rl.run.budget
from a2rl.grading.daemon import GradingDaemon
from a2rl.recording.transcripts import parse_usage
from a2rl.run.budget import Budget
from a2rl.run.submit import RunSubmitter
from a2rl.run.workspace import create_workspace
from a2rl.scheduling.launcher import open_sweep
from a2rl.spec.tasks import get_task
from a2rl.tasklib.prepare import ensure_prepared
from conftest import FIXTURES, REPO, write_sweep
from test_runs import launch, only_result


def _event(tokens_in: int, tokens_out: int, cost: float) -> str:
    return '{"type": "result", "total_cost_usd": %s, "usage": {"input_tokens": %d, "output_tokens": %d}}\n' % (
        cost,
        tokens_in,
        tokens_out,
    )


def test_ledger_entries_carry_budget_time_and_tokens_so_far(tmp_path, tiny_model, fake_clock, monkeypatch):
    monkeypatch.setattr(a2rl.run.budget, "time", fake_clock)
    sweep, (spec,) = open_sweep(write_sweep(tmp_path), tmp_path / "sd")
    task = get_task("echo", [FIXTURES / "tasks"])
    ws = create_workspace(
        sweep.workspace(spec.run_id),
        task=task,
        data=ensure_prepared(task, sweep.data_root()),
        model_dir=tiny_model,
        budget_s=600,
        source_tree=REPO,
    )
    transcript = [""]
    submitter = RunSubmitter(
        sweep, spec, ws, Budget(600, clock=fake_clock), usage=lambda: parse_usage("claude", transcript[0])
    )
    grader = GradingDaemon(sweep)
    for dt, event in ((30, ""), (45, _event(100, 20, 0.25)), (60, _event(300, 80, 0.5))):
        fake_clock.sleep(dt)
        transcript[0] += event
        submitter.submit("output/missing", wait=False)  # invalid, and recorded like any other
    while (claim := sweep.queue.claim(grader.holder, 60, sweep.ledger.has)) is not None:
        grader.grade(claim)
    entries = sweep.ledger.entries(spec.run_id)
    assert [e.budget_used_s for e in entries] == [30, 75, 135]
    assert [e.tokens for e in entries] == [None, 120, 500]
    assert [e.cost_usd for e in entries] == [None, 0.25, 0.75]


def test_a_transcript_that_cannot_be_read_costs_the_tokens_not_the_submission(tmp_path, tiny_model):
    sweep, (spec,) = open_sweep(write_sweep(tmp_path), tmp_path / "sd")
    task = get_task("echo", [FIXTURES / "tasks"])
    ws = create_workspace(
        sweep.workspace(spec.run_id),
        task=task,
        data=ensure_prepared(task, sweep.data_root()),
        model_dir=tiny_model,
        budget_s=600,
        source_tree=REPO,
    )

    def broken():
        raise OSError("gone")

    submitter = RunSubmitter(sweep, spec, ws, Budget(600), usage=broken)
    submitter.submit("output/missing", wait=False)
    (queued,) = sweep.queue.pending.glob("*.json")
    assert '"tokens": null' in queued.read_text()


@pytest.mark.slow  # a whole sweep
def test_a_real_run_records_tokens_from_its_transcript_at_each_submission(tmp_path):
    sweep = launch(tmp_path, agents=["talker"])
    result = only_result(sweep)
    assert result.status == "ok", result.failure_reason
    entries = sweep.ledger.entries(result.run_id)
    assert [e.tokens for e in entries] == [110, 220] and [e.cost_usd for e in entries] == [0.5, 1.0]
    assert 0 <= entries[0].budget_used_s <= entries[1].budget_used_s <= result.agent_seconds
