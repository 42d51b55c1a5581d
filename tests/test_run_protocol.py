"""An agent is told which protocol its run is graded under (run_meta.json, $EVAL_PROTOCOL, instructions.md), and
nothing more of the grader than that name."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from a2rl.run.workspace import agent_env, create_workspace
from a2rl.spec.tasks import get_task
from a2rl.tasklib.prepare import ensure_prepared
from conftest import FIXTURES, REPO, a2rl, write_sweep


def test_the_workspace_and_environment_name_the_protocol(tmp_path, tiny_model):
    task = get_task("echo", [FIXTURES / "tasks"])
    data = ensure_prepared(task, tmp_path / "data")
    ws = create_workspace(
        tmp_path / "ws", task=task, data=data, model_dir=tiny_model, budget_s=60, source_tree=REPO, protocol="a2rl"
    )
    assert "scored under the `a2rl`\nprotocol" in (ws.root / "instructions.md").read_text()
    env = agent_env(
        ws,
        task="echo",
        protocol="a2rl",
        model_name="tiny-llama",
        url="http://127.0.0.1:9",
        cpus=1,
        passthrough=[],
        python=Path(sys.executable),
    )
    assert env["EVAL_PROTOCOL"] == "a2rl"
    assert not any(str(data.heldout_dir) in v or str(task.folder) in v for v in env.values())


@pytest.mark.slow  # whole sweeps
@pytest.mark.parametrize("protocols, expected, preset", [(None, "paper", None), (["a2rl"], "a2rl", "qwen3-nothinking")])
def test_a_run_sees_its_protocol_and_chat_template_kwargs(tmp_path, protocols, expected, preset):
    fields = {"agents": ["informed"]} | ({"protocols": protocols} if protocols else {})
    if preset:  # the model's generation preset: its chat_template_kwargs are how the grader renders chat prompts
        fields["models"] = [{"name": "tiny-llama", "path": "builtin:tiny-llama", "generation": preset}]
    proc = a2rl("launch", str(write_sweep(tmp_path, **fields)), "--sweep-dir", str(tmp_path / "sd"), "--wait")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (told_file,) = (tmp_path / "sd").rglob("output/told.json")
    told = json.loads(told_file.read_text())
    assert told["env"]["EVAL_PROTOCOL"] == expected and told["run_meta"]["protocol"] == expected
    assert f"scored under the `{expected}`\nprotocol" in told["instructions"]
    assert told["run_meta"]["chat_template_kwargs"] == ({"enable_thinking": False} if preset else {})
