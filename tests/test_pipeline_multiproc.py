"""The reference agent's multi-process training on CPU, as a sweep runs it: `accelerate launch` with 2 processes in
a gloo group (torchrun's workers), plain DDP for SFT then GRPO, and DeepSpeed ZeRO-2 (the shipped config) with LoRA.
Rank 0 alone saves, submits and records: each stage is submitted and recorded once, and the grader scores the
merged model it saved. Tiny model, arith, a few steps (scorable, not learned)."""

from __future__ import annotations

import re

import pytest
import yaml

from a2rl.store.results import RunResult
from a2rl.store.stages import StageLog
from a2rl.store.sweepdir import SweepDir
from conftest import a2rl

pytest.importorskip("trl")

SHORT = {
    "sft_steps": 2,
    "sft_batch_size": 4,
    "grpo_steps": 1,
    "grpo_prompts": 2,
    "num_generations": 2,
    "max_completion_length": 8,
    "no_schedule": True,
    "processes": 2,
}


@pytest.mark.slow
@pytest.mark.parametrize("extra", [{}, {"deepspeed": "zero2", "lora_r": 4}], ids=["ddp", "deepspeed-zero2-lora"])
def test_two_cpu_processes_train_and_rank_zero_alone_submits_and_records(tmp_path, extra):
    spec = {
        "name": "mp",
        "tasks": ["arith"],
        "agents": [{"name": "pipeline", "args": {**SHORT, **extra}}],
        "models": ["builtin:tiny-llama"],
        "seeds": [0],
        "budget": "15m",
        "executor": "local",
        "resources": {"cpus": 2, "mem_gb": 8},
        "grader": {"workers": 1},
    }
    path = tmp_path / "mp.yaml"
    path.write_text(yaml.safe_dump(spec))
    proc = a2rl("launch", str(path), "--sweep-dir", str(tmp_path / "sd"), "--wait", timeout=1500)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    sweep = SweepDir(tmp_path / "sd")
    (run,) = sweep.runs()
    log = (sweep.run_dir(run.run_id) / "agent.log").read_text()
    result = RunResult.load(sweep.result_path(run.run_id))
    assert result.status == "ok", (result.failure_reason, log[-3000:])
    assert "2 process(es) on CPU" in log and "--num_processes 2" in log, log[-3000:]
    # one submission per stage, each graded: a second rank submitting would add some or be refused (429)
    assert (result.submissions, result.valid_submissions) == (2, 2), log[-3000:]
    assert all(s is not None for s in result.scores) and "submit failed" not in log
    assert not re.search(r"\b429\b", log), log[-3000:]  # a word of its own: torch's log timestamps hold digits
    stages = StageLog.load(sweep.run_dir(run.run_id) / "stages.json").stages
    assert [(s.name, s.steps, s.hyperparameters["processes"]) for s in stages] == [("sft", 2, 2), ("grpo", 1, 2)]
    assert len({s.submission_id for s in stages}) == 2 and None not in {s.submission_id for s in stages}
    assert stages[0].hyperparameters["deepspeed"] == extra.get("deepspeed")
    assert stages[0].hyperparameters["lora_r"] == extra.get("lora_r", 0)
