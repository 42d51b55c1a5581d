"""The six LLM agent stacks, each run end to end against a fake CLI installed on PATH under its binary name:
argv and environment as declared, the task written to the CLI's instructions file, its submission scored, and
tokens/cost read from its transcript. Plus the launch-time checks: credentials, driver families, prompt modes."""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import pytest

from a2rl.drivers.endpoint import DriverEndpoint
from a2rl.recording.snapshots import load_snapshots
from a2rl.reporting.metrics import RunMetrics
from a2rl.spec.agents import agent_registry
from a2rl.spec.grid import expand
from a2rl.spec.sweep import default_agent_python, load_sweep
from a2rl.store.results import RunResult
from conftest import FIXTURES, a2rl, write_sweep
from fakes import cli_wrapper
from test_runs import launch, only_result

FAKECLI = FIXTURES / "fakecli" / "fakecli.py"
STACKS = {  # stack: (driver, binary, expected cost: None where the CLI reports none)
    "claude": ("claude-sonnet-4-5", "claude", 0.75),
    "codex": ("gpt-5.4", "codex", None),
    "gemini": ("gemini-2.5-flash", "gemini", None),
    "opencode": ("openai/gpt-5.4", "opencode", 0.75),
    "openhands": ("anthropic/claude-sonnet-4-5", "openhands", 0.75),
    "rdagent": ("gpt-4o", "rdagent", 0.75),
}


@pytest.fixture
def fake_bin(tmp_path, monkeypatch) -> Path:
    """Wrappers named like each CLI, found through the stacks' `$A2RL_AGENT_BIN` path entry, which the sandbox
    binds read-only: the fake CLI runs from there (not from the source tree, which the agent cannot see) with
    the agents' own interpreter."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for script in (FAKECLI, FIXTURES / "agents" / "variants.py"):
        shutil.copy(script, bindir / script.name)
    for stack, (_, binary, _) in STACKS.items():
        cli_wrapper(bindir, binary, default_agent_python(), bindir / FAKECLI.name, stack)
    monkeypatch.setenv("A2RL_AGENT_BIN", str(bindir))
    monkeypatch.setenv("SECRET", "launcher-only")
    return bindir


@pytest.mark.slow  # a whole sweep
@pytest.mark.parametrize("name", ["openhands"])  # every stack also runs for real: tests/test_real_*.py
def test_stack_runs_its_cli_and_records_usage(tmp_path, monkeypatch, fake_bin, name):
    driver, _, cost = STACKS[name]
    stack = agent_registry().get(name)
    for var in stack.credential_vars():
        monkeypatch.setenv(var, f"key-for-{name}")
    sweep = launch(tmp_path, agents=[name], drivers=[driver], modes=["rl-only"])
    result = only_result(sweep)
    assert result.run_id == f"echo__{name}__{driver.replace('/', '-')}__tiny-llama__rl-only__s0"
    assert result.status == "ok" and result.agent_exit_code == 0, (
        sweep.run_dir(result.run_id) / "agent.log"
    ).read_text()
    assert result.scores == [42.0]

    seen = json.loads((sweep.workspace(result.run_id) / "output" / "fakecli.json").read_text())
    argv, env = seen["argv"], seen["env"]
    if stack.driver_env:
        assert env[stack.driver_env] == driver
    else:
        assert argv[argv.index("--model") + 1] == driver
    assert all(env[var] == f"key-for-{name}" for var in stack.credential_vars())
    assert {"TASK", "BASE_MODEL", "WORKSPACE", "MODEL_PATH", "DATA_PATH", "OUTPUT_DIR", "GRADING_SERVER_URL"} <= set(
        env
    )
    assert not {"SECRET", "A2RL_CACHE", "A2RL_SCRATCH", "A2RL_AGENT_BIN"} & set(env)
    assert seen["cwd"] == str(sweep.workspace(result.run_id) / "code")
    told = (sweep.workspace(result.run_id) / "code" / stack.instructions_file).read_text()
    assert "# Instructions" in told and "RL only" in told and stack.instructions_file in seen["files"]

    usage = result.usage
    assert (usage.parser, usage.input_tokens, usage.cached_input_tokens, usage.output_tokens, usage.cost_usd) == (
        stack.transcript,
        1500,
        300,
        400,
        cost,
    )
    m = RunMetrics.load(sweep.run_dir(result.run_id) / "report" / "metrics.json")
    assert (m.input_tokens, m.output_tokens, m.cost_usd, m.mode, m.train_type) == (1500, 400, cost, "rl-only", "GRPO")
    (snap,) = load_snapshots(sweep.root, result.run_id)
    assert sorted(snap.added) == sorted([stack.instructions_file, "train.py"])


def test_missing_credential_fails_the_launch(tmp_path, monkeypatch):
    for var in ("ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_AUTH_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    path = write_sweep(tmp_path, agents=["claude"], drivers=["claude-sonnet-4-5"])
    proc = a2rl("launch", str(path), "--sweep-dir", str(tmp_path / "sd"))
    assert proc.returncode == 2
    assert (
        "agents[0]: agent 'claude' needs ANTHROPIC_API_KEY or CLAUDE_CODE_OAUTH_TOKEN or ANTHROPIC_AUTH_TOKEN, "
        "which is not set"
    ) in proc.stderr
    assert not (tmp_path / "sd").exists()  # nothing created, nothing submitted


def test_driver_families_and_modes(tmp_path):
    with pytest.raises(Exception) as e:
        load_sweep(write_sweep(tmp_path, agents=["claude", "codex"], drivers=["gpt-5.4"], modes=["free", "rl"]))
    lines = e.value.lines
    assert any("agents[0]: agent 'claude' does not support driver 'gpt-5.4'" in line for line in lines), lines
    assert any("modes[1]: unknown mode 'rl' (known: free, rl-only, sft-only)" in line for line in lines), lines
    # per-agent drivers mix stacks of different families in one sweep; modes apply to driven agents only
    runs = expand(
        load_sweep(
            write_sweep(
                tmp_path,
                agents=[
                    {"name": "claude", "drivers": ["claude-opus-4-6"]},
                    {"name": "codex", "drivers": ["gpt-5.4", "gpt-4o"]},
                    "baseline",
                ],
                modes=["free", "sft-only"],
            )
        )
    )
    assert [r.run_id for r in runs] == [
        "echo__claude__claude-opus-4-6__tiny-llama__s0",
        "echo__claude__claude-opus-4-6__tiny-llama__sft-only__s0",
        "echo__codex__gpt-5.4__tiny-llama__s0",
        "echo__codex__gpt-5.4__tiny-llama__sft-only__s0",
        "echo__codex__gpt-4o__tiny-llama__s0",
        "echo__codex__gpt-4o__tiny-llama__sft-only__s0",
        "echo__baseline__none__tiny-llama__s0",
    ]


LOCAL_TINY = {"tiny": {"model": "builtin:tiny-llama", "backend": "transformers", "gpus": 0, "cpus": 1, "mem_gb": 4}}


@pytest.mark.slow  # a whole sweep
def test_local_driver_serves_agents_through_an_openai_compatible_server(tmp_path, monkeypatch, fake_bin):
    """A sweep-served model drives two stacks with no API key in the launcher's environment: each agent gets
    the server's URL and key in its stack's variables and gets a real completion; without the key, 401."""
    for var in ("OPENAI_API_KEY", "CODEX_API_KEY", "LLM_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    sweep = launch(tmp_path, agents=["codex", "openhands"], drivers=["local:tiny"], local_drivers=LOCAL_TINY)
    results = {r.agent: r for r in (RunResult.load(sweep.result_path(run.run_id)) for run in sweep.runs())}
    endpoint = DriverEndpoint.load(sweep.drivers / "tiny" / "endpoint.json")
    assert endpoint.backend == "transformers" and endpoint.model == "tiny"
    for name, model_var, url_var, key_var in (
        ("codex", None, "OPENAI_BASE_URL", "CODEX_API_KEY"),
        ("openhands", "LLM_MODEL", "LLM_BASE_URL", "LLM_API_KEY"),
    ):
        result = results[name]
        assert result.run_id == f"echo__{name}__local-tiny__tiny-llama__s0"
        assert result.status == "ok" and result.scores == [42.0], result.failure_reason
        seen = json.loads((sweep.workspace(result.run_id) / "output" / "fakecli.json").read_text())
        env, argv = seen["env"], seen["argv"]
        assert (env[model_var] if model_var else argv[argv.index("--model") + 1]) == (
            "openai/tiny" if model_var else "tiny"
        )
        assert env[url_var] == endpoint.base_url and env[url_var].startswith("http://127.0.0.1:")
        assert env[key_var] == endpoint.api_key
        status, reply = seen["chat"]
        assert status == 200 and reply["model"] == "tiny" and reply["usage"]["completion_tokens"] > 0
        assert reply["choices"][0]["message"]["role"] == "assistant"
        assert seen["chat_without_key"][0] == 401
        log = (sweep.run_dir(result.run_id) / "agent.log").read_text()
        assert f"local driver 'tiny': model 'tiny' at {endpoint.base_url}" in log and endpoint.api_key not in log
    deadline = time.monotonic() + 30  # the server leaves once every run using it has a result
    while DriverEndpoint.load(sweep.drivers / "tiny" / "endpoint.json").state != "exited":
        assert time.monotonic() < deadline, "the driver server did not exit"
        time.sleep(0.5)
    assert DriverEndpoint.load(sweep.drivers / "tiny" / "endpoint.json").note == "every run using it has finished"
    status = a2rl("status", str(sweep.root), check=True).stdout
    assert "local driver tiny: exited: every run using it has finished tiny at http://127.0.0.1:" in status


@pytest.mark.sidebyside
@pytest.mark.slow  # a whole sweep
def test_a_local_driver_that_never_serves_fails_the_run_as_infra(tmp_path, monkeypatch, fake_bin):
    """The driver's interpreter has no vLLM (this one): its server exits at start; the run waits `startup_timeout_s`
    (set-up, before its budget starts) and fails with a reason naming the driver, before its agent ever starts."""
    broken = {
        "big": {
            "model": "builtin:tiny-llama",
            "backend": "vllm",
            "gpus": 0,
            "cpus": 1,
            "mem_gb": 4,
            "startup_timeout_s": 10,
            "python": sys.executable,
        }
    }
    sweep = launch(tmp_path, agents=["codex"], drivers=["local:big"], local_drivers=broken)
    result = only_result(sweep)
    assert result.status == "failed" and "local driver 'big': no live server after 10 s" in result.failure_reason
    # the 10 s wait was set-up, not the agent's time: the agent never started, so its budget never ran
    assert result.agent_seconds == 0 and result.setup_seconds >= 10 and result.submissions == 0
    assert not (sweep.workspace(result.run_id) / "output" / "fakecli.json").exists()
    server_logs = list((sweep.drivers / "big").glob("server-*.log"))
    assert server_logs and "vllm" in server_logs[0].read_text()
    m = RunMetrics.load(sweep.run_dir(result.run_id) / "report" / "metrics.json")
    assert m.failure_source == "infra"


@pytest.mark.slow  # 3-9 s: kept out of the fast layer
def test_local_driver_checks_at_launch(tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    stacks = tmp_path / "stacks"  # every shipped stack that needs a driver can use a local one
    stacks.mkdir()
    (stacks / "apionly.yaml").write_text("name: apionly\ncommand: [apionly]\nneeds_driver: true\n")
    with pytest.raises(Exception) as e:
        load_sweep(
            write_sweep(
                tmp_path,
                agents=["apionly", {"name": "codex", "drivers": ["local:nope"]}],
                drivers=["local:tiny"],
                local_drivers=LOCAL_TINY,
                agent_paths=[str(FIXTURES / "agents"), str(stacks)],
            )
        )
    assert e.value.lines == [
        f"{tmp_path / 't.yaml'}: agents[0]: agent 'apionly' cannot use local driver 'local:tiny': its stack declares "
        "no `openai_compatible` endpoint settings",
        f"{tmp_path / 't.yaml'}: agents[1]: driver 'local:nope' names no entry of local_drivers (defined: tiny)",
    ]
    # a local driver brings its own key: codex's OPENAI_API_KEY is not asked of the launcher, but with an API
    # driver it still is
    proc = a2rl(
        "launch",
        str(write_sweep(tmp_path, agents=[{"name": "codex", "drivers": ["local:tiny"]}], local_drivers=LOCAL_TINY)),
        "--dry-run",
    )
    assert "echo__codex__local-tiny__tiny-llama__s0" in proc.stdout and "credentials: ok" in proc.stdout
    assert "OPENAI_API_KEY" not in proc.stderr, proc.stderr
    proc = a2rl(
        "launch",
        str(
            write_sweep(
                tmp_path, agents=[{"name": "codex", "drivers": ["local:tiny", "gpt-5.4"]}], local_drivers=LOCAL_TINY
            )
        ),
        "--sweep-dir",
        str(tmp_path / "sd"),
    )
    assert (
        proc.returncode == 2
        and "agents[0]: agent 'codex' needs OPENAI_API_KEY or CODEX_API_KEY, which is not set" in proc.stderr
    )


def test_cli_settings_are_written_into_the_runs_home_never_read_from_the_checkout(tmp_path):
    """A CLI reads its settings from files a2rl writes into the run's private HOME: no stack points a CLI at a
    file under its folder in the checkout (gemini skips a settings file whose parent others can write, as a
    checkout under /tmp). The one {stack_dir} left is rdagent's PYTHONPATH: code, which Python imports from any
    directory."""
    from pydantic import ValidationError

    from a2rl.spec.agents import AgentStack

    stacks = [agent_registry().get(n) for n in agent_registry().names()]
    pointing = {s.name: v for s in stacks for v in s.env.values() if "{stack_dir}" in v}
    assert pointing == {"rdagent": "{stack_dir}/rdagent"}
    gemini = agent_registry().get("gemini")
    gemini.write_home_files(tmp_path)
    assert json.loads((tmp_path / ".gemini" / "settings.json").read_text()) == {
        "security": {"auth": {"selectedType": "gemini-api-key"}}
    }
    with pytest.raises(ValidationError, match="stay under HOME"):
        AgentStack(name="x", command=["x"], home_files={"../.bashrc": {}})
