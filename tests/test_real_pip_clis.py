"""The real OpenHands CLI (pip, its own venv under $A2RL_AGENT_CLIS/venvs, tools/agents/install.sh openhands) in
one sweep of two parallel runs against the scripted model server (tests/scripted_server.py), reached through its stack's
real variables (LLM_MODEL, LLM_BASE_URL, LLM_API_KEY, read only with --override-with-envs): it trains and submits a
model that gets graded, its token totals are read from its conversation state (written when it ends), and the
wrap-up signal reaches it before its run ends `timeout` with its last model auto-submitted. Plus the parser on its real
output (tests/fixtures/transcripts/openhands-1.16.0)."""

from __future__ import annotations

from pathlib import Path

import pytest

from a2rl.recording.transcripts import parse_usage, transcript_files
from a2rl.run.sandbox import with_link_targets
from a2rl.spec.agents import agent_registry
from scripted_server import PLAN_SUBMIT, PLAN_WRAP_UP, ModelPerDriver, ScriptedModel, scripted_server
from test_real_clis import ENV_NAMES, files_holding, use_real_cli
from test_runs import launch, results_by_agent

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "transcripts" / "openhands-1.16.0"


@pytest.fixture(scope="module")
def openhands_sweep(tmp_path_factory):
    """One sweep with two runs of the real CLI, in parallel, told apart at the scripted server by their drivers:
    one that trains and submits (gpt-5.4), and one run to its budget's end that waits for the wrap-up signal
    (gpt-4o). (the sweep, its results by agent entry, the server's model, the launcher's key)"""
    plan = [PLAN_SUBMIT[0], ENV_NAMES, *PLAN_SUBMIT[1:]]
    server_model = ModelPerDriver({"gpt-5.4": ScriptedModel(plan), "gpt-4o": ScriptedModel(PLAN_WRAP_UP)})
    with pytest.MonkeyPatch.context() as mp, scripted_server([], model=server_model) as (url, _, _):
        key = use_real_cli(mp, "openhands", "LLM_BASE_URL", url + "/v1")
        # the wrap-up run reaches its wait ~20 s in (full suite, 2 busy cores); the signal comes 4 s (5%) before
        # the end. The grader's idle limit is far shorter than the runs: it must stay while they are at work, so
        # the auto-submission finds it
        sweep = launch(
            tmp_path_factory.mktemp("openhands"),
            network="full",
            budget=80,
            agents=[
                {"name": "openhands", "drivers": ["openai/gpt-5.4"]},
                {"name": "openhands", "label": "openhands-wrap-up", "drivers": ["openai/gpt-4o"]},
            ],
            grader={"poll_s": 0.05, "lease_s": 5, "idle_timeout_s": 20},
        )
    return sweep, results_by_agent(sweep), server_model, key


def test_openhands_state_parses():
    """Its real conversation state and stdout (a run against the scripted server; cost from litellm's price
    table for gpt-5.4)."""
    text = (FIXTURE / "stdout.jsonl").read_text() + (FIXTURE / "base_state.json").read_text()
    u = parse_usage("openhands", text)
    assert (u.calls, u.input_tokens, u.cached_input_tokens, u.output_tokens, u.cost_usd) == (
        6,
        27055,
        60,
        120,
        0.069303,
    )
    assert parse_usage("openhands", (FIXTURE / "stdout.jsonl").read_text()).input_tokens is None  # none on stdout
    stopped = '{"stats": {"usage_to_metrics": {"agent": {"accumulated_cost": 0.0, "response_latencies": []}}}}'
    assert parse_usage("openhands", stopped).input_tokens is None  # zeros of a state never finished: unknown


def test_transcript_files_stay_in_the_agents_home(tmp_path):
    """The state files are read from the agent's HOME; a link it plants there (to a file of the grader's, say)
    is not followed."""
    home, outside = tmp_path / "home", tmp_path / "grader-secret.json"
    (home / ".openhands" / "conversations" / "c1").mkdir(parents=True)
    (home / ".openhands" / "conversations" / "c1" / "base_state.json").write_text('{"stats": {}}')
    outside.write_text('{"secret": 1}')
    (home / ".openhands" / "conversations" / "c2").mkdir()
    (home / ".openhands" / "conversations" / "c2" / "base_state.json").symlink_to(outside)
    text = transcript_files(home, agent_registry().get("openhands").transcript_files)
    assert '{"stats": {}}' in text and "secret" not in text


def test_a_venvs_bin_binds_the_venv_and_its_base_python(tmp_path):
    """A pip stack's CLI lives in a venv: the sandbox needs its site-packages and the Python it was made from
    (a pyenv build loads libpython3.12.so from its own prefix)."""
    base, venv = tmp_path / "pyenv" / "3.12.1", tmp_path / "venvs" / "openhands"
    (base / "bin").mkdir(parents=True)
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text(f"home = {base / 'bin'}\ninclude-system-site-packages = false\n")
    assert set(with_link_targets([venv / "bin"])) == {base, venv}


@pytest.mark.sidebyside
@pytest.mark.slow  # a whole sweep with the real CLI (shared with the wrap-up test)
def test_real_openhands_trains_and_submits(openhands_sweep):
    sweep, results, server_model, key = openhands_sweep
    result, model = results["openhands"], server_model.models["gpt-5.4"]
    log = (sweep.run_dir(result.run_id) / "agent.log").read_text()
    assert result.status == "ok" and result.agent_exit_code == 0, log[-3000:]
    assert result.scores == [0.0], log[-3000:]  # the trained model, graded (the echo task scores it 0)
    ws = sweep.workspace(result.run_id)
    assert any(str(ws / "code") in out for out in model.tool_outputs)  # `pwd` ran in code/
    names = set((ws / "output" / "env-names.txt").read_text().split())
    assert {"TASK", "MODEL_PATH", "DATA_PATH", "OUTPUT_DIR", "GRADING_SERVER_URL", "GRADING_TOKEN"} <= names
    assert not {"SECRET", "A2RL_AGENT_CLIS", "A2RL_CACHE", "A2RL_SCRATCH"} & names
    assert (ws / "code" / "train.py").exists() and (ws / "output" / "sft" / "config.json").exists()
    # each run's LLM_MODEL reached the server (litellm drops `openai/`)
    assert {r.model for r in server_model.requests} == {"gpt-5.4", "gpt-4o"}
    usage = result.usage
    assert usage.parser == "openhands" and usage.calls >= 5, log[-3000:]
    assert usage.input_tokens > 0 and usage.output_tokens == 20 * usage.calls
    assert not files_holding(sweep.root, key)  # the key never lands under the sweep directory


@pytest.mark.sidebyside
@pytest.mark.slow  # a whole sweep with the real CLI, run to its budget's end (shared, see above)
def test_real_openhands_gets_the_wrap_up_signal_and_times_out(openhands_sweep):
    sweep, results, server_model, _ = openhands_sweep
    result, model = results["openhands-wrap-up"], server_model.models["gpt-4o"]
    log = (sweep.run_dir(result.run_id) / "agent.log").read_text()
    assert result.status == "timeout", log[-3000:]
    assert any("wrap-up: the budget ends in" in out for out in model.tool_outputs), model.tool_outputs
    assert "auto-submitting" in log and result.scores == [0.0], log[-3000:]
    # its state file gets its totals only when the conversation ends: stopped, they are unknown, and it says so
    assert result.usage.calls == 0 and result.usage.input_tokens is None
    assert result.failure_reason.startswith(
        "the agent CLI `openhands` printed no transcript record the `openhands` parser reads before it was stopped ("
    ), result.failure_reason
