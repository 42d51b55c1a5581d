"""The pipeline agent's routes per declared train format, its devices, its budget-sized schedule and its stage
records. Training tests run the agent on each task's fixture rows with the tiny model (CPU, fp32) and score what
it saved with the task's own evaluator; GPU tests (marker gpu) skip without CUDA."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import typing
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch  # noqa: E402

from a2rl.errors import SpecError  # noqa: E402
from a2rl.reference import pipeline as P  # noqa: E402
from a2rl.reference.formats import STATIC_FORMATS  # noqa: E402
from a2rl.reference.process import device_args, gpu_count, launch_command  # noqa: E402
from a2rl.reference.rewards import final_number_reward, unit_test_reward  # noqa: E402
from a2rl.reference.schedule import Schedule, StopAt, stage_seconds  # noqa: E402
from a2rl.reporting.metrics import typed  # noqa: E402
from a2rl.run.artifacts import Limits, check_artifact  # noqa: E402
from a2rl.spec.registry import HOME  # noqa: E402
from a2rl.spec.tasks import TrainFormat, get_task, task_registry  # noqa: E402
from a2rl.store.stages import Stage, StageLog, collect_stage_log  # noqa: E402
from a2rl.tasklib.evaluator import load_evaluator
from a2rl.tasklib.prepare import ensure_prepared
from a2rl.tasklib.taskdata import read_jsonl  # noqa: E402
from fakes import FakeClock  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures"
SOURCES = {"gsm8k": FIXTURES / "gsm8k", "alpacaeval": FIXTURES / "alpacaeval"}
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def test_every_task_declares_a_format_the_pipeline_has_a_route_for():
    formats = {name: get_task(name).spec.train_format for name in task_registry().names()}
    assert formats["gsm8k"] == "qa_numeric" and formats["humaneval"] == "code_with_tests"
    assert formats["alpacaeval"] == "instruction_reference" and formats["alfworld"] == "env_trajectories"
    assert set(typing.get_args(TrainFormat)) == {*STATIC_FORMATS, "env_trajectories"}  # each has a route
    assert set(formats.values()) <= set(typing.get_args(TrainFormat))


def test_an_unknown_format_is_a_one_line_error(tmp_path):
    folder = tmp_path / "echo"
    folder.mkdir()
    yaml = (FIXTURES / "tasks" / "echo" / "task.yaml").read_text()
    (folder / "task.yaml").write_text(yaml.replace("train_format: qa_short", "train_format: qa_long"))
    with pytest.raises(SpecError, match=r"train_format: Input should be 'qa_short'.*\(got 'qa_long'\)"):
        get_task("echo", [tmp_path])


def test_the_format_comes_from_the_workspaces_run_meta(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKSPACE", str(tmp_path))
    (tmp_path / "run_meta.json").write_text(json.dumps({"train_format": "qa_numeric"}))
    assert P.train_format(P.parse_args([])) == "qa_numeric"
    assert P.train_format(P.parse_args(["--train-format", "qa_short"])) == "qa_short"
    (tmp_path / "run_meta.json").write_text(json.dumps({"task": "x"}))
    with pytest.raises(ValueError, match="pass --train-format"):
        P.train_format(P.parse_args([]))


def test_gpus_come_from_the_job_and_each_gets_a_process(monkeypatch):
    assert gpu_count({"CUDA_VISIBLE_DEVICES": "4,5,6"}, True, 8) == 3
    assert gpu_count({}, True, 2) == 2
    assert gpu_count({"CUDA_VISIBLE_DEVICES": "0,1"}, False, 0) == 0
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    cmd = launch_command(["--sft-steps", "3"], 3, True, None, port=29600)
    assert cmd[1:] == [
        "-m",
        "accelerate.commands.launch",
        "--num_processes",
        "3",
        "--num_machines",
        "1",
        "--main_process_port",
        "29600",
        "--mixed_precision",
        "bf16",
        "--multi_gpu",
        "--module",
        "a2rl.reference.pipeline",
        "--sft-steps",
        "3",
    ]
    zero3 = HOME / "configs" / "agents" / "deepspeed" / "zero3.json"
    ds = launch_command([], 2, True, zero3)
    assert ds[11:14] == ["--use_deepspeed", "--deepspeed_config_file", str(zero3)] and "--multi_gpu" not in ds
    cpu = launch_command([], 2, False, None)  # CPU processes: fp32, torchrun's workers in a gloo group
    assert cpu[9:13] == ["--mixed_precision", "no", "--multi_gpu", "--module"] and int(cpu[8]) > 0  # a free port
    assert launch_command([], 1, True, None) is None and launch_command([], 1, False, None) is None
    monkeypatch.setenv("LOCAL_RANK", "0")  # a launched worker trains itself
    assert launch_command([], 4, True, None) is None


def test_more_processes_than_gpus_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(P.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(P.torch.cuda, "device_count", lambda: 2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert P.main(["--train-format", "qa_short", "--processes", "3"]) == 2
    assert "--processes 3: between 1 and the job's GPUs (2)" in capsys.readouterr().out
    monkeypatch.setattr(P.torch.cuda, "is_available", lambda: False)
    assert P.main(["--train-format", "qa_short", "--processes", "0"]) == 2
    assert "--processes 0: at least 1" in capsys.readouterr().out


def test_bf16_on_gpu_fp32_on_cpu():
    assert device_args(True) == {"bf16": True, "use_cpu": False}
    assert device_args(False) == {"bf16": False, "use_cpu": True}


def test_named_deepspeed_configs_resolve_in_the_stacks_folder():
    args = P.parse_args(["--deepspeed", "zero2", "--deepspeed-dir", str(HOME / "configs" / "agents" / "deepspeed")])
    config = json.loads(P.deepspeed_config(args).read_text())
    assert config["zero_optimization"]["stage"] == 2
    with pytest.raises(ValueError, match="no config at"):
        P.deepspeed_config(P.parse_args(["--deepspeed", "zero9", "--deepspeed-dir", "/nonexistent"]))


def test_stages_share_the_budget_left_and_stop_at_their_deadline():
    assert stage_seconds(1000, 2) == 425.0  # 15% kept for the last submission
    assert stage_seconds(100, 1) == 40.0  # at least a minute kept
    clock, left = FakeClock(), iter([1000.0, 300.0])
    schedule = Schedule(["sft", "grpo"], remaining=lambda: next(left), clock=clock)
    assert schedule.deadline("sft") == clock() + 425.0
    assert schedule.deadline("grpo") == clock() + 240.0  # the one stage left takes all but the reserve
    stop = StopAt(clock() + 5, clock)
    control = SimpleNamespace(should_training_stop=False)
    stop.on_step_end(None, None, control)
    assert not control.should_training_stop
    clock.now += 5
    stop.on_step_end(None, None, control)
    assert control.should_training_stop


def test_rewards_are_the_graders_checks():
    gold = "She has 3 + 4 = <<3+4=7>>7 apples.\n#### 7"
    assert final_number_reward(
        [" 3 + 4 = 7.\n#### 7\n\nQuestion: 8", " #### 8", " 7 then\n\nQuestion: #### 9"], [gold] * 3
    ) == [1.0, 0.0, 1.0]  # cut where the grader stops generating


def test_unit_test_reward_runs_the_visible_tests(tmp_path):
    rows = read_jsonl(ensure_prepared(get_task("humaneval"), tmp_path).train_dir / "train.jsonl")[:2]
    rewards = unit_test_reward(
        [r["canonical_solution"] for r in rows] + ["    return None\n"],
        [r["prompt"] for r in rows] + [rows[0]["prompt"]],
        [r["test"] for r in rows] + [rows[0]["test"]],
        [r["entry_point"] for r in rows] + [rows[0]["entry_point"]],
    )
    assert rewards == [1.0, 1.0, 0.0]


def test_report_types_come_from_code_else_from_the_self_reported_stages(tmp_path):
    stage = dict(hyperparameters={}, planned_steps=5, wall_s=1.0)
    log = StageLog(
        agent="pipeline",
        stages=[
            Stage(name="sft", steps=5, model_dir="sft", submission_id="s1", **stage),
            Stage(name="grpo", steps=2, model_dir="grpo", submission_id="s2", **stage),
        ],
    )
    assert log.route() == "SFT→GRPO"
    assert typed([], log, "s1") == (["SFT"], "self-reported")
    assert typed([], log, "s2") == (["SFT", "GRPO"], "self-reported")
    assert typed([], log, None) == (["SFT", "GRPO"], "self-reported")
    assert typed(["DPO"], log, "s2") == (["DPO"], "code")
    assert typed([], None, "s1") == ([], None)
    # collected only when it is a stage log; garbage or a link is skipped
    log.dump(tmp_path / "stages.json")
    assert collect_stage_log(tmp_path / "stages.json", tmp_path / "copy.json").stages == log.stages
    assert StageLog.load(tmp_path / "copy.json").stages == log.stages
    (tmp_path / "bad.json").write_text('{"stages": "all of them"}')
    assert collect_stage_log(tmp_path / "bad.json", tmp_path / "copy2.json") is None
    (tmp_path / "link.json").symlink_to(tmp_path / "stages.json")
    assert collect_stage_log(tmp_path / "link.json", tmp_path / "copy3.json") is None
    assert not (tmp_path / "copy2.json").exists() and not (tmp_path / "copy3.json").exists()


# ---------------------------------------------------------------- training on the fixture rows (CPU)
def run_pipeline(data: Path, model: Path, out: Path, fmt: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, MODEL_PATH=str(model), DATA_PATH=str(data), OUTPUT_DIR=str(out), OMP_NUM_THREADS="1")
    env.pop("GRADING_SERVER_URL", None)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    proc = subprocess.run(
        [sys.executable, "-m", "a2rl.reference.pipeline", "--train-format", fmt, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def scored(task_name: str, data_root: Path, model: Path, out: Path, protocol: str = "a2rl", **options) -> float:
    """The model as the grader takes it: a valid artifact, scored by the task's evaluator under `protocol`."""
    from a2rl.llm.inference import Generator

    check_artifact(model, out, Limits(64, 1 << 30, 1 << 30)).close()  # raises for what the grader would refuse
    task = get_task(task_name)
    return load_evaluator(task).evaluate(
        Generator.load(model), task.data(data_root).heldout_dir, {**task.spec.eval, **options, "protocol": protocol}
    )["score"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "task_name,options",
    [("gsm8k", {"limit": 4, "max_new_tokens": 32}), ("humaneval", {"limit": 2, "max_new_tokens": 32})],
)
def test_sft_then_grpo_on_the_fixture_rows_submits_scorable_models(task_name, options, tmp_path, tiny_model):
    task = get_task(task_name)
    data = ensure_prepared(task, tmp_path / "data", source=SOURCES.get(task_name))
    out = tmp_path / "out"
    run_pipeline(
        data.train_dir,
        tiny_model,
        out,
        task.spec.train_format,
        "--protocol",
        "a2rl",
        "--sft-steps",
        "3",
        "--sft-batch-size",
        "2",
        "--grpo-steps",
        "2",
        "--grpo-prompts",
        "2",
        "--num-generations",
        "2",
        "--max-completion-length",
        "16",
    )
    for stage in ("sft", "grpo"):
        assert scored(task_name, tmp_path / "data", out / stage, out, **options) >= 0.0
    stages = StageLog.load(out / "stages.json")
    assert [(s.name, s.steps, s.model_dir) for s in stages.stages] == [("sft", 3, "sft"), ("grpo", 2, "grpo")]
    assert stages.stages[0].hyperparameters["dtype"] == "float32" and stages.route() == "SFT→GRPO"
    reward = STATIC_FORMATS[task.spec.train_format].routes["a2rl"].reward
    assert stages.stages[1].hyperparameters["reward"] == reward.__name__


@pytest.mark.slow
def test_instruction_rows_get_sft_only(tmp_path, tiny_model):
    data = ensure_prepared(get_task("alpacaeval"), tmp_path / "data", source=SOURCES["alpacaeval"])
    out = tmp_path / "out"
    proc = run_pipeline(
        data.train_dir, tiny_model, out, "instruction_reference", "--sft-steps", "2", "--sft-batch-size", "2"
    )
    assert "stage grpo skipped" in proc.stdout and not (out / "grpo").exists()
    check_artifact(out / "sft", out, Limits(64, 1 << 30, 1 << 30)).close()
    assert StageLog.load(out / "stages.json").route() == "SFT"


@pytest.mark.slow
def test_lora_run_submits_a_merged_model_that_learned(tmp_path, tiny_model):
    data = ensure_prepared(get_task("arith"), tmp_path / "data")
    out = tmp_path / "out"
    run_pipeline(
        data.train_dir, tiny_model, out, "qa_short", "--sft-steps", "150", "--grpo-steps", "0", "--lora-r", "16"
    )
    files = {p.name for p in (out / "sft").iterdir()}
    assert "model.safetensors" in files and "adapter_config.json" not in files  # merged full weights
    assert StageLog.load(out / "stages.json").stages[0].hyperparameters["lora_r"] == 16
    assert scored("arith", tmp_path / "data", out / "sft", out) > 0.0  # the base model scores 0


# ---------------------------------------------------------------- GPU
@pytest.mark.gpu
@cuda
def test_one_sft_and_one_grpo_step_in_bf16_on_a_gpu(tmp_path, tiny_model):
    env = dict(
        os.environ,
        MODEL_PATH=str(tiny_model),
        DATA_PATH=str(ensure_prepared(get_task("arith"), tmp_path / "data").train_dir),
        OUTPUT_DIR=str(tmp_path / "out"),
        CUDA_VISIBLE_DEVICES="0",
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "a2rl.reference.pipeline",
            "--train-format",
            "qa_short",
            "--sft-steps",
            "1",
            "--grpo-steps",
            "1",
            "--grpo-prompts",
            "2",
            "--num-generations",
            "2",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    stages = StageLog.load(tmp_path / "out" / "stages.json").stages
    assert [(s.name, s.steps, s.hyperparameters["dtype"]) for s in stages] == [
        ("sft", 1, "bfloat16"),
        ("grpo", 1, "bfloat16"),
    ]


@pytest.mark.gpu
@cuda
def test_accelerate_launch_with_the_runs_gpus(tmp_path, tiny_model):
    gpus = torch.cuda.device_count()
    env = dict(
        os.environ,
        MODEL_PATH=str(tiny_model),
        DATA_PATH=str(ensure_prepared(get_task("arith"), tmp_path / "data").train_dir),
        OUTPUT_DIR=str(tmp_path / "out"),
        CUDA_VISIBLE_DEVICES=",".join(map(str, range(gpus))),
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "a2rl.reference.pipeline",
            "--train-format",
            "qa_short",
            "--sft-steps",
            "2",
            "--grpo-steps",
            "0",
            "--deepspeed",
            "zero2",
            "--deepspeed-dir",
            str(HOME / "configs" / "agents" / "deepspeed"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"--num_processes {gpus}" in proc.stdout
    assert StageLog.load(tmp_path / "out" / "stages.json").stages[0].hyperparameters["processes"] == gpus
