"""Issue 12's bad input, end to end: an agent CLI that hangs without output, or prints a transcript its parser
cannot read, gives a run result whose failure reason says so, never a crashed job. Stand-ins (a real CLI cannot
be made to do either on demand): tests/fixtures/fakecli/badcli.py under the binaries of two stacks, in one
sweep whose runs go in parallel. (A crashing CLI, the real claude: tests/test_real_clis.py.)"""

from __future__ import annotations

import shutil

import pytest

from a2rl.spec.agents import agent_registry
from a2rl.spec.sweep import default_agent_python
from conftest import FIXTURES
from fakes import cli_wrapper
from test_runs import launch, results_by_agent

BADCLI = FIXTURES / "fakecli" / "badcli.py"
BEHAVES = {"codex": "hang", "claude": "gibberish"}  # stack (its binary's name too): what its stand-in does


@pytest.mark.sidebyside
@pytest.mark.slow  # a whole sweep
def test_a_hanging_or_unparseable_cli_gives_a_result_that_says_so(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    shutil.copy(BADCLI, bindir / BADCLI.name)  # where the sandbox can read it (the bin dir is bound)
    for stack, mode in BEHAVES.items():
        cli_wrapper(bindir, stack, default_agent_python(), bindir / BADCLI.name, mode)
        for var in agent_registry().get(stack).credential_vars():
            monkeypatch.setenv(var, "key")
    monkeypatch.setenv("A2RL_AGENT_BIN", str(bindir))
    sweep = launch(
        tmp_path,
        agents=[{"name": "codex", "drivers": ["gpt-5.4"]}, {"name": "claude", "drivers": ["claude-sonnet-4-5"]}],
        budget=15,
    )
    results = results_by_agent(sweep)
    hung, gibberish = results["codex"], results["claude"]
    assert hung.status == "timeout" and hung.usage.calls == 0, hung
    assert hung.failure_reason == "the agent CLI `codex` printed nothing before it was stopped", hung.failure_reason
    assert gibberish.status == "ok" and gibberish.agent_exit_code == 0, gibberish
    assert gibberish.failure_reason == (
        "the agent CLI `claude` printed no transcript record the `claude` parser "
        "reads (2 line(s) of other output): its tokens and cost are unknown"
    )
    assert gibberish.usage.calls == 0 and gibberish.usage.input_tokens is None
