"""Getting the paper's models onto the cluster (`a2rl fetch-model`) and its Table 2 grid
(configs/sweeps/paper-table2.yaml).

The hub is unreachable here: the download's argument plumbing is checked with huggingface_hub.snapshot_download
replaced by a recorder, and the real call's offline failure must be one clear line."""

from __future__ import annotations

from pathlib import Path

import huggingface_hub
import pytest
import yaml

from a2rl.cli.main import main
from a2rl.spec.grid import expand
from a2rl.spec.sizing import grader_mem_gb
from a2rl.spec.sweep import load_sweep
from a2rl.store.modeldirs import check_shapes
from conftest import REPO, a2rl
from test_grading_resources import QWEN25_7B, shaped_model

PAPER = REPO / "configs" / "sweeps" / "paper-table2.yaml"
QWEN3_8B = dict(vocab=151936, hidden=4096, inter=12288, layers=36, kv=1024)


def test_fetch_model_plumbing(tmp_path, monkeypatch, capsys):
    calls = []

    def recorder(repo_id, **kwargs):
        calls.append((repo_id, kwargs))
        return str(shaped_model(Path(kwargs["local_dir"]), **QWEN25_7B))

    monkeypatch.setattr(huggingface_hub, "snapshot_download", recorder)
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    assert main(["fetch-model", "Qwen/Qwen2.5-7B-Instruct", "--to", str(tmp_path / "m"), "--revision", "v1"]) == 0
    ((repo, kw),) = calls
    assert repo == "Qwen/Qwen2.5-7B-Instruct" and kw["local_dir"] == tmp_path / "m" and kw["revision"] == "v1"
    assert kw["token"] == "hf_secret"
    assert "*.safetensors" in kw["allow_patterns"] and not any(
        "bin" in p or "pt" == p[-2:] for p in kw["allow_patterns"]
    )
    assert "7.616B parameters" in capsys.readouterr().out


def test_fetch_model_without_safetensors_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda repo_id, **kw: str(tmp_path))
    assert main(["fetch-model", "someone/pickles", "--to", str(tmp_path)]) == 2
    assert "has no safetensors weights" in capsys.readouterr().err


def test_fetch_model_offline_is_one_clear_line(tmp_path):
    r = a2rl("fetch-model", "Qwen/Qwen2.5-0.5B", "--to", str(tmp_path / "m"), timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("error: cannot download Qwen/Qwen2.5-0.5B from the Hugging Face hub") and "resume" in line


@pytest.mark.slow  # 5 s: the paper grid expanded on models of the real shapes
def test_paper_table2_is_valid_and_fits_its_shapes(tmp_path):
    """The grid as shipped, with its two model paths pointed at models of the real shapes: it validates, expands to
    2 models x 6 tasks x the stacks' drivers, and its grader and run shapes hold both models."""
    spec = yaml.safe_load(PAPER.read_text())
    for m in spec["models"]:
        m["path"] = str(shaped_model(tmp_path / m["name"], **(QWEN25_7B if "2.5" in m["name"] else QWEN3_8B)))
    (tmp_path / "paper.yaml").write_text(yaml.safe_dump(spec))
    loaded = load_sweep(tmp_path / "paper.yaml")
    assert loaded.budget == 12 * 3600 and loaded.resources.gpus == 1 and loaded.grader.gpus == 1
    runs = expand(loaded)
    assert {r.task for r in runs} == {"gsm8k", "humaneval", "alpacaeval", "alfworld", "webshop", "deepsearchqa"}
    assert {r.model.name for r in runs} == {"Qwen2.5-7B-Instruct", "Qwen3-8B-Base"}
    assert len(runs) == 2 * 6 * (2 + 3 + 1 + 1 + 1 + 1)
    params = check_shapes(loaded)
    assert round(params["Qwen3-8B-Base"] / 1e9, 2) == 8.19  # Qwen3-8B's model card: 8.2B
    assert grader_mem_gb(loaded, params) == 24  # 8 GiB + the 8B's bf16 weights
    dry = a2rl("launch", str(tmp_path / "paper.yaml"), "--dry-run", timeout=300)
    assert f"{len(runs)} runs (dry run: nothing submitted)" in dry.stdout, dry.stderr
    # the shapes hold both models; what this machine lacks (API keys, CLIs, data) the dry run names as launch would
    assert "\n  models: ok\n" in dry.stdout and "Qwen3-8B-Base 8.19B (from its weights)" in dry.stdout
    assert "error: grader" not in dry.stderr and "error: resources" not in dry.stderr, dry.stderr
