"""Credentials: each stack's real variables (any one of alternatives), CLI login files standing in for them when
the sweep opts in (`agent_logins`), mounted read-only into the workspace's HOME, and no key ever written under
the sweep directory (tests/test_real_clis.py checks that for every real CLI's run)."""

from __future__ import annotations

import hashlib
import json
import secrets

import pytest

from a2rl.errors import SpecError
from a2rl.spec.agents import agent_registry
from a2rl.spec.sweep import load_sweep
from conftest import a2rl, write_sweep
from scripted_server import PLAN_SUBMIT, Step, scripted_server
from test_real_clis import files_holding
from test_runs import launch, only_result

CLAUDE_VARS = ("ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_AUTH_TOKEN")


def test_any_alternative_or_a_login_satisfies_a_stack(tmp_path):
    claude, codex = agent_registry().get("claude"), agent_registry().get("codex")
    home = {"HOME": str(tmp_path)}
    assert claude.missing_credentials(home) == [" or ".join(CLAUDE_VARS)]
    for var in CLAUDE_VARS:
        assert claude.missing_credentials({**home, var: "k"}) == []
    assert codex.missing_credentials({**home, "CODEX_API_KEY": "k"}) == []
    login = tmp_path / ".claude" / ".credentials.json"
    login.parent.mkdir()
    login.write_text("{}")
    assert claude.missing_credentials(home, logins=True) == []
    assert claude.missing_credentials(home) == [" or ".join(CLAUDE_VARS)]  # not without the sweep's opt-in
    assert codex.missing_credentials(home, logins=True) == ["OPENAI_API_KEY or CODEX_API_KEY"]  # its own file


def test_a_login_lets_the_launch_pass_only_when_the_sweep_opts_in(tmp_path, monkeypatch):
    for var in CLAUDE_VARS:
        monkeypatch.delenv(var, raising=False)
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / ".credentials.json").write_text("{}")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("A2RL_AGENT_BIN", "/bin")  # any `claude` would do: the check stops at credentials
    path = write_sweep(tmp_path, agents=["claude"], drivers=["claude-sonnet-4-5"])
    proc = a2rl("launch", str(path), "--sweep-dir", str(tmp_path / "sd"))
    assert proc.returncode == 2 and "agent 'claude' needs ANTHROPIC_API_KEY or" in proc.stderr
    with pytest.raises(SpecError) as e:
        load_sweep(
            write_sweep(
                tmp_path,
                name="n",
                agents=["claude"],
                drivers=["claude-sonnet-4-5"],
                agent_logins=True,
                isolation="none",
            )
        )
    assert any("agent_logins needs a sandbox" in line for line in e.value.lines), e.value.lines


@pytest.mark.slow  # a whole sweep with the real claude
def test_a_login_is_mounted_read_only_and_never_copied(tmp_path, monkeypatch):
    """The real claude with the launcher's login file mounted (the scripted server needs no real token, so
    the key variable carries the request): its shell reads the file in its HOME, cannot change it, and no copy
    of the token is left under the sweep directory."""
    from test_real_clis import clis_prefix

    token = f"sk-ant-oat-test-{secrets.token_hex(16)}"
    home = tmp_path / "launcher-home"
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / ".credentials.json").write_text(json.dumps({"claudeAiOauth": {"accessToken": token}}))
    monkeypatch.setenv("A2RL_AGENT_CLIS", str(clis_prefix()))
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("A2RL_AGENT_BIN", raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-scripted")
    # the agent proves it can read the file by its hash: printing the token would put it in the transcript
    probe = Step(
        "shell",
        'sha256sum "$HOME/.claude/.credentials.json"; '
        'echo x >> "$HOME/.claude/.credentials.json" && echo WROTE || echo READ-ONLY',
    )
    with scripted_server([PLAN_SUBMIT[0], probe, Step("finish")]) as (url, model, _):
        monkeypatch.setenv("ANTHROPIC_BASE_URL", url)
        sweep = launch(tmp_path, agents=["claude"], drivers=["claude-sonnet-4-5"], network="full", agent_logins=True)
    result = only_result(sweep)
    log = (sweep.run_dir(result.run_id) / "agent.log").read_text()
    assert result.status == "ok", log[-3000:]
    assert "agent_logins: mounting" in log
    out = model.tool_outputs[1]
    digest = hashlib.sha256((home / ".claude" / ".credentials.json").read_bytes()).hexdigest()
    assert digest in out and "READ-ONLY" in out and "WROTE" not in out, out
    assert (home / ".claude" / ".credentials.json").read_text().endswith("}")  # unchanged
    assert not files_holding(sweep.root, token)
    assert not files_holding(sweep.workspace(result.run_id), token)  # only a bind, nothing copied
