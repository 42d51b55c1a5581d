"""The real RD-Agent RL loop (pip, its own venv under $A2RL_AGENT_CLIS/venvs, tools/agents/install.sh rdagent)
in one sweep of two runs against the scripted model server (tests/scripted_server.py, answers in
tests/rdagent_model.py), reached through its stack's real variables (CHAT_MODEL, OPENAI_API_BASE,
OPENAI_API_KEY): its loop writes and runs the training script, which submits a model that gets graded, and its
litellm records are parsed into tokens; and the wrap-up signal reaches the code it runs and, through that code's
output, its feedback step, before its run ends `timeout` with its last model auto-submitted."""

from __future__ import annotations

from pathlib import Path

import pytest

from a2rl.recording.transcripts import parse_usage
from rdagent_model import WRAP_UP_THEN_HANG, RDAgentModel
from scripted_server import ModelPerDriver, scripted_server
from test_real_clis import files_holding, use_real_cli
from test_runs import launch, results_by_agent

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "transcripts" / "rdagent-1.0.0.log"


@pytest.fixture(scope="module")
def rdagent_sweep(tmp_path_factory):
    """One sweep with two runs of the real loop, in parallel, told apart at the scripted server by their
    drivers: one loop that trains and submits (gpt-5.4), and one run to its budget's end that waits for the
    wrap-up signal (gpt-4o). (the sweep, its results by agent entry, the server's model, the launcher's key)"""
    server_model = ModelPerDriver({"gpt-5.4": RDAgentModel(), "gpt-4o": RDAgentModel(WRAP_UP_THEN_HANG)})
    with pytest.MonkeyPatch.context() as mp, scripted_server([], model=server_model) as (url, _, _):
        key = use_real_cli(mp, "rdagent", "OPENAI_API_BASE", url + "/v1")
        # the wrap-up run's second loop reaches its wait 21-48 s in (2 busy cores, load 1-3); the signal comes
        # 5 s (5%) before the end. The grader's idle limit is far shorter than the runs: it must stay while they are
        # at work, so the auto-submission finds it
        sweep = launch(
            tmp_path_factory.mktemp("rdagent"),
            network="full",
            budget=100,
            agents=[
                {"name": "rdagent", "args": {"loop_n": 1}, "drivers": ["openai/gpt-5.4"]},
                {"name": "rdagent", "label": "rdagent-wrap-up", "drivers": ["openai/gpt-4o"]},
            ],
            grader={"poll_s": 0.05, "lease_s": 5, "idle_timeout_s": 20},
        )
    return sweep, results_by_agent(sweep), server_model, key


@pytest.mark.sidebyside
@pytest.mark.slow  # a whole sweep with the real RD-Agent loop (shared with the wrap-up test)
def test_real_rdagent_trains_and_submits(rdagent_sweep):
    sweep, results, server_model, key = rdagent_sweep
    result, rd = results["rdagent"], server_model.models["gpt-5.4"]
    log = (sweep.run_dir(result.run_id) / "agent.log").read_text()
    assert result.status == "ok" and result.agent_exit_code == 0, log[-3000:]
    assert result.scores == [0.0], log[-3000:]  # the trained model, graded (the echo task scores it 0)
    assert rd.stages == ["负责生成训练假设", "code", "负责分析实验结果"], rd.stages  # one whole loop
    ws = sweep.workspace(result.run_id)
    assert (ws / "code" / "main.py").exists() and (ws / "output" / "sft" / "config.json").exists()
    # each run's CHAT_MODEL reached the server (litellm drops `openai/`)
    assert {r.model for r in server_model.requests} == {"gpt-5.4", "gpt-4o"}
    usage = result.usage
    assert usage.parser == "litellm" and usage.calls == 3, log[-3000:]
    assert usage.input_tokens > 0 and usage.output_tokens == 20 * 3
    assert parse_usage("litellm", log).calls == 3
    assert not files_holding(sweep.root, key)  # the key never lands under the sweep directory


@pytest.mark.sidebyside
@pytest.mark.slow  # a whole sweep with the real RD-Agent loop, run to its budget's end (shared, see above)
def test_real_rdagent_gets_the_wrap_up_signal_and_times_out(rdagent_sweep):
    sweep, results, server_model, _ = rdagent_sweep
    result, rd = results["rdagent-wrap-up"], server_model.models["gpt-4o"]
    log = (sweep.run_dir(result.run_id) / "agent.log").read_text()
    assert result.status == "timeout", log[-3000:]
    # loop 1 trained; loop 2's code waited for WRAP_UP and printed it, and RD-Agent handed that output to its
    # feedback step
    assert rd.stages[:6] == ["负责生成训练假设", "code", "负责分析实验结果"] * 2, rd.stages
    feedback = rd.requests[5]
    assert any("wrap-up: the budget ends in" in m.text for m in feedback.messages), feedback.messages
    assert "auto-submitting" in log and result.scores == [0.0], log[-3000:]
    # RD-Agent prints a usage record per completion (the adapter's callback), so loop 1's at least: totals known
    usage = result.usage
    assert usage.calls >= 3 and usage.input_tokens > 0 and usage.output_tokens == 20 * usage.calls, log[-3000:]
    assert result.failure_reason is None, result.failure_reason


def test_rdagent_log_parses():
    """Its real log (one loop against the scripted server; tests/fixtures/transcripts/rdagent-1.0.0.log): the
    adapter's three litellm records, costs from litellm's price table for gpt-5.4; the model's own JSON replies
    and RD-Agent's text around them are not counted."""
    u = parse_usage("litellm", FIXTURE.read_text())
    assert (u.calls, u.output_tokens, u.cached_input_tokens) == (3, 60, 0)
    assert (u.input_tokens, u.cost_usd) == (397 + 563 + 419, 0.004348)  # 0.0012925 + 0.0017075 + 0.0013475
