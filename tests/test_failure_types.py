"""The run report's failure types (reporting/metrics.py), branch by branch, on records built in memory."""

from __future__ import annotations

import pytest

from a2rl.reporting.metrics import SubmissionRow, run_failure, submission_failure
from a2rl.spec.agents import agent_registry
from a2rl.store.ledger import LedgerEntry
from a2rl.store.results import RunResult


def entry(status: str = "scored", score: float | None = 50.0, copy_of_base: bool = False) -> LedgerEntry:
    return LedgerEntry(
        submission_id="r.1",
        run_id="r",
        seq=1,
        submitted_at=10.0,
        claimed_at=11.0,
        graded_at=12.0,
        status=status,
        score=score,
        model_path="output/v1",
        copy_of_base=copy_of_base,
        task="echo",
        protocol="paper",
        evaluator_version=1,
        grader="g",
        attempt=1,
    )


def result(
    status: str = "ok", baseline: float | None = 40.0, ungraded: int = 0, exit_code: int | None = 0
) -> RunResult:
    return RunResult(
        run_id="r",
        task="echo",
        protocol="paper",
        agent="a",
        driver="d",
        model="m",
        seed=0,
        status=status,
        agent_exit_code=exit_code,
        baseline=baseline,
        ungraded_submissions=ungraded,
        budget_s=60.0,
        started_at=0.0,
        ended_at=60.0,
    )


def row(failure_type: str | None, seq: int = 1, score: float | None = 50.0) -> SubmissionRow:
    return SubmissionRow(
        iteration=seq,
        submission_id=f"r.{seq}",
        at_s=float(seq),
        status="scored",
        score=score,
        improvement=None,
        delta_prev=None,
        copy_of_base=False,
        train_type="none",
        failure_type=failure_type,
    )


# --------------------------------------------------------------------------- per submission


@pytest.mark.parametrize(
    "e, baseline, types, expected",
    [
        (entry("invalid", None), 40.0, ["GRPO"], "code_error_runtime"),  # invalid wins over everything below
        (entry(copy_of_base=True, score=40.0), 40.0, [], "copy_model_fallback"),
        (entry(copy_of_base=True, score=90.0), None, [], "copy_model_fallback"),  # before the baseline check
        (entry(score=90.0), None, ["SFT"], "unknown"),  # no baseline: nothing to compare with
        (entry(score=40.5), 40.0, [], None),  # improved
        (entry(score=19.9), 40.0, ["GRPO"], "training_diverged"),  # below half the baseline
        (entry(score=20.0), 40.0, [], "unknown"),  # exactly half: not diverged
        (entry(score=40.0), 40.0, ["SFT", "GRPO"], "rollout_logic_wrong"),  # not better, RL in the code
        (entry(score=30.0), 40.0, ["PPO"], "rollout_logic_wrong"),
        (entry(score=40.0), 40.0, ["SFT", "DPO"], "unknown"),  # not better, no RL
        (entry(score=30.0), 40.0, [], "unknown"),
    ],
)
def test_submission_failure(e, baseline, types, expected):
    assert submission_failure(e, baseline, types) == expected


# --------------------------------------------------------------------------- per run


@pytest.mark.parametrize(
    "res",
    [result(status="failed"), result(baseline=None), result(ungraded=1)],
    ids=["failed run", "no baseline", "ungraded submission"],
)
def test_infra_failures_come_before_the_agents(res):
    """Even an improved best is not read when the run, its baseline or its grading did not complete."""
    assert run_failure(res, row(None), [row(None)], "loss: nan") == ("unknown", "infra")


def test_an_improved_best_is_no_failure():
    rows = [row("training_diverged", 1, 10.0), row(None, 2, 90.0)]
    assert run_failure(result(), rows[1], rows, "loss = nan") == (None, None)


@pytest.mark.parametrize(
    "status, exit_code, log, expected",
    [
        ("timeout", 0, "", "timeout_no_submission"),
        ("timeout", 1, "Traceback (most recent call last):", "timeout_no_submission"),  # the timeout is the story
        ("ok", 1, "", "code_error_runtime"),  # crashed: non-zero exit
        ("ok", -9, "", "code_error_runtime"),  # killed by a signal
        ("ok", 0, "x\nTraceback (most recent call last):\n  File ...", "code_error_runtime"),  # exit 0, traceback
        ("ok", None, "", "unknown"),  # no exit code recorded, nothing in the log
        ("ok", 0, "training done", "unknown"),  # ended cleanly without submitting
    ],
)
def test_no_submissions(status, exit_code, log, expected):
    assert run_failure(result(status=status, exit_code=exit_code), None, [], log) == (expected, "agent")


@pytest.mark.parametrize("log", ["{'loss': nan, 'grad_norm': 1.0}", "loss = NaN", "step 3 loss: inf", '"loss": "nan"'])
def test_a_nan_or_inf_loss_in_the_log_is_divergence(log):
    rows = [row("rollout_logic_wrong")]
    assert run_failure(result(), rows[0], rows, f"step 1\n{log}\n") == ("training_diverged", "agent")


@pytest.mark.parametrize("log", ["loss: 0.5", "loss: nano", "loss: infinite", "eval_nan_count: 0", "no loss here: nan"])
def test_other_logs_are_not_divergence(log):
    rows = [row("rollout_logic_wrong")]
    assert run_failure(result(), rows[0], rows, log) == ("rollout_logic_wrong", "agent")


def test_without_a_valid_submission_the_last_ones_type_is_the_runs():
    rows = [row("copy_model_fallback", 1), row("code_error_runtime", 2, None)]
    assert run_failure(result(), None, rows, "") == ("code_error_runtime", "agent")


def test_the_best_submissions_type_is_the_runs():
    best = row("rollout_logic_wrong", 1, 35.0)
    rows = [best, row("training_diverged", 2, 5.0)]
    assert run_failure(result(), best, rows, "") == ("rollout_logic_wrong", "agent")


def test_a_control_that_submitted_nothing_is_no_failure():
    # the `baseline` stack (configs/agents/baseline.yaml, control: true) submits nothing by design
    assert agent_registry().get("baseline").control and not agent_registry().get("claude").control
    assert run_failure(result(), None, [], "", control=True) == (None, None)
    assert run_failure(result(status="timeout"), None, [], "", control=True) == ("timeout_no_submission", "agent")
    assert run_failure(result(), None, [], "") == ("unknown", "agent")  # any other stack's: a failure
