"""`a2rl validate` reports what `a2rl launch` refuses (one check list: scheduling/readiness.py), and its capacity
plan needs neither the weights nor prepared data (store/modeldirs.py planned_params, task.yaml heldout_size)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from a2rl.cli.main import main
from a2rl.spec.sweep import load_sweep
from a2rl.store.modeldirs import KNOWN_MODELS, planned_params
from a2rl.weights import config_parameter_count, parameter_count
from conftest import REPO, write_sweep
from test_grading_resources import QWEN25_7B, QWEN25_7B_PARAMS, shaped_model

PAPER = REPO / "configs" / "sweeps" / "paper-table2.yaml"
CREDENTIALS = (
    "ANTHROPIC_API_KEY",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "ANTHROPIC_AUTH_TOKEN",
    "OPENAI_API_KEY",
    "CODEX_API_KEY",
    "GEMINI_API_KEY",
    "LLM_API_KEY",
)
QWEN3_8B_CONFIG = {
    "model_type": "qwen3",
    "hidden_size": 4096,
    "num_hidden_layers": 36,
    "vocab_size": 151936,
    "intermediate_size": 12288,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "tie_word_embeddings": False,
}


def _fresh(tmp_path) -> dict[str, str]:
    """A machine that has the checkout set up and nothing else: no models, no prepared data, no API keys, no CLIs."""
    env = {k: v for k, v in os.environ.items() if k not in CREDENTIALS}
    return {**env, "HOME": str(tmp_path), "A2RL_CACHE": str(tmp_path / "cache"), "A2RL_AGENT_CLIS": str(tmp_path)}


@pytest.mark.slow  # 9 s: the whole paper grid validated, planned and refused
def test_paper_table2_on_a_fresh_clone_prints_its_whole_plan_and_what_launch_refuses(tmp_path, monkeypatch, capsys):
    proc = subprocess.run(
        [sys.executable, "-m", "a2rl", "validate", str(PAPER)],
        capture_output=True,
        text=True,
        env=_fresh(tmp_path),
        cwd=tmp_path,
        timeout=120,
    )
    out, err = proc.stdout, proc.stderr
    assert proc.returncode == 2 and "Traceback" not in err, err
    table = f"known-model table {KNOWN_MODELS.relative_to(REPO)}"
    assert f"model sizes: Qwen2.5-7B-Instruct 7.62B ({table}); Qwen3-8B-Base 8.19B ({table})" in out, out
    grading = next(line for line in out.splitlines() if "grading (estimate)" in line)
    assert "unknown" not in grading and "gsm8k 1319 examples" in grading and "alfworld 134 examples" in grading
    assert grading.endswith("GPU-hours of evaluation"), grading
    assert "runs: 108 jobs x 13h00m" in out and "grader jobs: 1 x 1 GPU" in out
    for item in ("credentials: 5 problem(s)", "agent CLIs: 5 problem(s)", "models: 2 problem(s)", "isolation: ok"):
        assert f"\n  {item}\n" in out, item
    for line in (
        "error: agents[0]: agent 'claude' needs ANTHROPIC_API_KEY or CLAUDE_CODE_OAUTH_TOKEN or ANTHROPIC_AUTH_TOKEN, "
        "which is not set",
        "error: agents[1]: agent 'codex' runs `codex`, which is not installed in",
        "error: models[1].path: model directory '/models/Qwen3-8B-Base' does not exist",
        f"error: task 'gsm8k' is not prepared under {tmp_path / 'cache' / 'data'}: run `a2rl prepare gsm8k",
        "error: launch refuses this sweep on this machine until these are fixed",
    ):
        assert line in err, (line, err)
    assert "humaneval" not in err  # prepared offline by the launch itself

    # validated on a laptop for a login node (in this process): the same items, labelled, and no error
    for k, v in _fresh(tmp_path).items():
        monkeypatch.setenv(k, v)
    for k in CREDENTIALS:
        monkeypatch.delenv(k, raising=False)
    assert main(["validate", str(PAPER), "--elsewhere"]) == 0
    elsewhere = capsys.readouterr()
    assert elsewhere.err == "", elsewhere.err
    assert "what launch checks on the launching machine (--elsewhere: not errors here):" in elsewhere.out
    assert (
        "    launch will check: models[0].path: model directory '/models/Qwen2.5-7B-Instruct' does not exist"
        in elsewhere.out
    )
    assert "    launch will check: agents[2]: agent 'gemini' needs GEMINI_API_KEY, which is not set" in elsewhere.out


def test_launch_refuses_what_validate_reports_and_writes_nothing(tmp_path, capsys):
    sweep = write_sweep(tmp_path, models=["/does/not/exist"])
    line = "models[0].path: model directory '/does/not/exist' does not exist"
    assert main(["validate", str(sweep)]) == 2
    assert f"error: {line}" in capsys.readouterr().err
    assert main(["launch", str(sweep), "--sweep-dir", str(tmp_path / "sd")]) == 2
    assert f"error: {line}" in capsys.readouterr().err
    assert not (tmp_path / "sd").exists()  # refused before anything was written or submitted
    assert main(["validate", str(sweep), "--elsewhere"]) == 0
    assert f"launch will check: {line}" in capsys.readouterr().out


def test_parameter_counts_without_weights(tmp_path):
    """The weights' own count where they are there, else config.json, else `params:`, else the known-model table."""
    assert config_parameter_count(QWEN3_8B_CONFIG) == 8_190_735_360  # its safetensors' count
    weights = shaped_model(tmp_path / "weights", **QWEN25_7B)
    assert parameter_count(weights) == QWEN25_7B_PARAMS
    qwen25 = {k: v for k, v in QWEN3_8B_CONFIG.items() if k != "head_dim"}
    qwen25 |= {"model_type": "qwen2", "hidden_size": 3584, "num_hidden_layers": 28, "vocab_size": 152064}
    qwen25 |= {"intermediate_size": 18944, "num_attention_heads": 28, "num_key_value_heads": 4}
    assert config_parameter_count(qwen25) == QWEN25_7B_PARAMS
    assert config_parameter_count({"model_type": "mamba", "d_model": 768}) is None
    known = {k.rsplit("/", 1)[1]: v for k, v in yaml.safe_load(KNOWN_MODELS.read_text()).items()}
    assert int(known["Qwen2.5-7B-Instruct"]) == QWEN25_7B_PARAMS and int(known["Qwen3-8B-Base"]) == 8_190_735_360

    configured = tmp_path / "configured"
    configured.mkdir()
    (configured / "config.json").write_text(json.dumps(QWEN3_8B_CONFIG))
    models = [
        {"name": "w", "path": str(weights)},
        {"name": "c", "path": str(configured)},
        {"name": "p", "path": str(tmp_path / "absent"), "params": "7.6e9"},  # as YAML reads 7.6e9: a string
        {"name": "Qwen2.5-7B-Instruct", "path": str(tmp_path / "absent")},
        {"name": "mystery", "path": str(tmp_path / "absent")},
    ]
    planned = planned_params(load_sweep(write_sweep(tmp_path, models=models)))
    assert planned == {
        "w": (QWEN25_7B_PARAMS, "from its weights"),
        "c": (8_190_735_360, "from its config.json"),
        "p": (7_600_000_000, "params: in the sweep"),
        "Qwen2.5-7B-Instruct": (QWEN25_7B_PARAMS, f"known-model table {KNOWN_MODELS.relative_to(REPO)}"),
    }
