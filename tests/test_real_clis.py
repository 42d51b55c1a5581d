"""The real agent CLIs (claude, codex, gemini, opencode; installed by tools/agents/install.sh into
$A2RL_AGENT_CLIS), together in one sweep per check (a run each, in parallel, told apart at the scripted model
server (tests/scripted_server.py) by their drivers), which they reach through their stacks' real base-URL
variables. Checked: each CLI ran in its workspace with our environment and none of the launcher's, its
submission was graded, its real transcript was parsed into tokens (and cost where the CLI has a price table), no
key landed under the sweep directory, and the wrap-up signal reached it before its run ended `timeout` with its
last model auto-submitted."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
from pathlib import Path

import pytest

from a2rl.recording.transcripts import parse_usage
from a2rl.spec.agents import agent_registry
from a2rl.store.results import RunResult
from a2rl.store.sweepdir import SweepDir
from conftest import a2rl, write_sweep
from scripted_server import PLAN_SUBMIT, PLAN_WRAP_UP, TRAIN, ScriptedModel, Step, scripted_server
from test_runs import launch, only_result, results_by_agent

CLIS = {  # stack: (driver, how its base URL is given, the URL's suffix, whether the CLI reports a cost)
    "claude": ("claude-sonnet-4-5", "ANTHROPIC_BASE_URL", "", True),
    "codex": ("gpt-5.5", "OPENAI_BASE_URL", "/v1", False),
    "gemini": ("gemini-2.5-flash", "GOOGLE_GEMINI_BASE_URL", "", False),
    "opencode": ("openai/gpt-5.4", "OPENAI_BASE_URL", "/v1", True),
}
# Totals after the stop: opencode prints a `step_finish` per model step, so always; codex and gemini die before
# printing theirs, so never; claude, its shell command killed, sometimes ends its turn and prints its `result`
# within the stop's grace period, and sometimes not.
TOTALS_WHEN_STOPPED = {"opencode": True, "codex": False, "gemini": False, "claude": None}
ENV_NAMES = Step("shell", 'env | cut -d= -f1 | sort > "$OUTPUT_DIR/env-names.txt"')


def clis_prefix() -> Path:
    return Path(os.environ.get("A2RL_AGENT_CLIS") or Path.home() / ".cache" / "a2rl" / "agent-clis")


def use_real_cli(monkeypatch, name: str, url_var: str, url: str) -> str:
    """The launcher's environment for the installed CLI of stack `name` (a missing CLI is a failure naming the
    install command, not a skip): its credentials set to a fresh fake key, which must stay out of the sweep
    directory, and its base URL in `url_var`. Returns the key."""
    stack = agent_registry().get(name)
    monkeypatch.setenv("A2RL_AGENT_CLIS", str(clis_prefix()))
    monkeypatch.delenv("A2RL_AGENT_BIN", raising=False)
    if stack.find_cli(dict(os.environ)) is None:
        pytest.fail(f"`{stack.cli_name}` is not installed under {clis_prefix()}: run tools/agents/install.sh {name}")
    key = f"sk-a2rl-test-{secrets.token_hex(16)}"
    for var in stack.credential_vars():
        monkeypatch.setenv(var, key)
    monkeypatch.setenv(url_var, url)
    monkeypatch.setenv("SECRET", "launcher-only")
    return key


@pytest.fixture
def cli_env(monkeypatch):
    def setup(name: str, url: str) -> str:
        _, url_var, suffix, _ = CLIS[name]
        return use_real_cli(monkeypatch, name, url_var, url + suffix)

    return setup


def every_cli_sweep(
    tmp_path_factory, plan: list[Step], **fields
) -> tuple[SweepDir, dict[str, RunResult], ScriptedModel, dict[str, set[str]]]:
    """One sweep of the four CLIs, each with its own driver, whose runs go in parallel against the scripted
    server with `plan`: the sweep, each run's result by stack, the server's model, and each stack's keys as the
    launcher held them."""
    with pytest.MonkeyPatch.context() as mp, scripted_server(plan) as (url, model, _):
        for name, (_, url_var, suffix, _) in CLIS.items():
            use_real_cli(mp, name, url_var, url + suffix)
        keys = {name: {os.environ[var] for var in agent_registry().get(name).credential_vars()} for name in CLIS}
        sweep = launch(
            tmp_path_factory.mktemp("clis"),
            network="full",
            **fields,
            agents=[{"name": name, "drivers": [CLIS[name][0]]} for name in sorted(CLIS)],
        )
    return sweep, results_by_agent(sweep), model, keys


@pytest.fixture(scope="module")
def submit_sweep(tmp_path_factory):
    return every_cli_sweep(tmp_path_factory, [PLAN_SUBMIT[0], ENV_NAMES, *PLAN_SUBMIT[1:]], budget=900)


@pytest.fixture(scope="module")
def wrap_up_sweep(tmp_path_factory):
    # each reaches its wait in under 40 s here (2 busy cores, the four at once); the signal comes 4.5 s before
    # the end. The grader's idle limit is far shorter than the runs: it must stay while they are at work, so
    # the auto-submissions find it.
    return every_cli_sweep(
        tmp_path_factory, PLAN_WRAP_UP, budget=90, grader={"poll_s": 0.05, "lease_s": 5, "idle_timeout_s": 20}
    )


def files_holding(root: Path, text: str) -> list[str]:
    return [str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and text.encode() in p.read_bytes()]


@pytest.mark.sidebyside
@pytest.mark.slow  # a whole sweep with the four real CLIs (one for the four tests)
@pytest.mark.parametrize("name", sorted(CLIS))
def test_real_cli_trains_and_submits(submit_sweep, name):
    sweep, results, model, keys = submit_sweep
    driver, _, _, costs = CLIS[name]
    result = results[name]
    log = (sweep.run_dir(result.run_id) / "agent.log").read_text()
    assert result.status == "ok" and result.agent_exit_code == 0, log[-3000:]
    assert result.scores == [0.0], log[-3000:]  # the trained model, graded (the echo task scores it 0)
    ws = sweep.workspace(result.run_id)
    outputs = model.tool_outputs_of[driver.split("/")[-1]]  # the driver reached the model
    assert str(ws / "code") in outputs[0], outputs  # `pwd` ran in code/
    names = set((ws / "output" / "env-names.txt").read_text().split())
    assert {"TASK", "MODEL_PATH", "DATA_PATH", "OUTPUT_DIR", "GRADING_SERVER_URL", "GRADING_TOKEN"} <= names
    assert not {"SECRET", "A2RL_AGENT_CLIS", "A2RL_CACHE", "A2RL_SCRATCH"} & names
    assert (ws / "code" / "train.py").exists() and (ws / "output" / "sft" / "config.json").exists()
    stack = agent_registry().get(name)
    assert "# Instructions" in (ws / "code" / stack.instructions_file).read_text()
    usage = result.usage
    assert usage.parser == name and usage.calls >= 1, log[-3000:]
    assert usage.input_tokens > 0 and usage.output_tokens > 0 and usage.output_tokens % 20 == 0
    assert (usage.cost_usd is not None and usage.cost_usd > 0) == costs
    assert not any(files_holding(sweep.root, key) for key in keys[name])  # no key lands under the sweep directory


@pytest.mark.sidebyside
@pytest.mark.slow  # a whole sweep with the four real CLIs, run to its budget's end (one for the four tests)
@pytest.mark.parametrize("name", sorted(CLIS))
def test_real_cli_gets_the_wrap_up_signal_and_times_out(wrap_up_sweep, name):
    sweep, results, model, _ = wrap_up_sweep
    result = results[name]
    log = (sweep.run_dir(result.run_id) / "agent.log").read_text()
    assert result.status == "timeout", log[-3000:]
    # the CLI's shell waited for WRAP_UP and handed its text back to the model
    outputs = model.tool_outputs_of.get(CLIS[name][0].split("/")[-1], [])
    assert any("wrap-up: the budget ends in" in out for out in outputs), outputs
    assert "auto-submitting" in log and result.scores == [0.0], log[-3000:]
    usage = result.usage
    totals = TOTALS_WHEN_STOPPED[name]
    if totals is None:  # either, but never a partial or made-up count
        totals = usage.calls > 0
    if totals:
        assert usage.calls >= 1 and usage.input_tokens > 0 and result.failure_reason is None, result.failure_reason
    else:  # no totals: the reason says so
        assert usage.calls == 0 and usage.input_tokens is None
        assert result.failure_reason.startswith(
            f"the agent CLI `{name}` printed no transcript record the `{name}` parser reads before it was stopped ("
        ), result.failure_reason


@pytest.mark.sidebyside
@pytest.mark.slow  # a whole sweep with the real claude
def test_a_crashing_cli_gives_a_result_that_says_so(tmp_path, cli_env):
    """Every request refused with an API error: the real claude gives up with a non-zero exit, and the run's
    result (not a crashed job) names it with its last line."""
    with scripted_server([], refuse="scripted refusal") as (url, _, requests):
        cli_env("claude", url)
        sweep = launch(tmp_path, agents=["claude"], drivers=["claude-sonnet-4-5"], network="full", budget=300)
    result = only_result(sweep)
    log = (sweep.run_dir(result.run_id) / "agent.log").read_text()
    assert requests and result.status == "ok" and result.agent_exit_code not in (0, None), log[-3000:]
    assert result.failure_reason.startswith(
        f"the agent CLI `claude` exited with code {result.agent_exit_code} (its last output line: "
    ), result.failure_reason
    assert "scripted refusal" in result.failure_reason


def test_a_missing_cli_fails_the_launch_naming_the_install_command(tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "x")
    monkeypatch.setenv("A2RL_AGENT_CLIS", str(tmp_path / "empty"))
    monkeypatch.delenv("A2RL_AGENT_BIN", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.cache/a2rl/agent-clis either
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    path = write_sweep(tmp_path, agents=["claude"], drivers=["claude-sonnet-4-5"])
    proc = a2rl("launch", str(path), "--sweep-dir", str(tmp_path / "sd"))
    assert proc.returncode == 2, proc.stderr
    assert "agents[0]: agent 'claude' runs `claude`, which is not installed in" in proc.stderr
    assert "install it with `tools/agents/install.sh claude`" in proc.stderr
    assert not (tmp_path / "sd").exists()


@pytest.mark.sidebyside
@pytest.mark.slow  # the real opencode, outside a sweep (about 10 s)
def test_opencode_speaks_chat_completions_with_an_openai_compatible_provider(tmp_path, cli_env):
    """The fourth wire protocol with a real client: opencode's OpenAI-compatible providers stream Chat
    Completions (tool calls included) from the scripted server."""
    plan = [Step("pwd"), Step("write"), Step("shell", "head -1 train.py"), Step("finish")]
    with scripted_server(plan) as (url, model, requests):
        cli_env("opencode", url)
        (tmp_path / "code").mkdir()
        (tmp_path / "home").mkdir()
        config = tmp_path / "opencode.json"
        config.write_text(
            json.dumps(
                {
                    "provider": {
                        "loc": {
                            "npm": "@ai-sdk/openai-compatible",
                            "name": "loc",
                            "options": {"baseURL": url + "/v1", "apiKey": "x"},
                            "models": {"m": {"name": "m"}},
                        }
                    }
                }
            )
        )
        binary = agent_registry().get("opencode").find_cli(dict(os.environ))
        proc = subprocess.run(
            [binary, "run", "--model", "loc/m", "--format", "json", "go"],
            cwd=tmp_path / "code",
            env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home"), "OPENCODE_CONFIG": str(config)},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert {path for path, _ in requests} == {"/v1/chat/completions"}
    assert any(json.loads(body).get("stream") for _, body in requests)
    assert (tmp_path / "code" / "train.py").read_text() == TRAIN
    assert model.tool_outputs[-1].strip() == TRAIN.splitlines()[0]
    assert parse_usage("opencode", proc.stdout).calls >= 1
