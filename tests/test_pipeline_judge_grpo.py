"""The pipeline's GRPO on judge tasks (instruction_reference rows) with a judge for training (--train-judge): the
reward asks that judge, a stub on a real loopback HTTP server here, to compare each completion with the train
row's reference; without one the pipeline does SFT only and its stage records say why GRPO was skipped."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from a2rl.grading.evaluate import evaluate_model  # noqa: E402
from a2rl.llm.judge import ChatClient  # noqa: E402
from a2rl.reference import pipeline as P  # noqa: E402
from a2rl.reference.formats import instruction_text, reference_text  # noqa: E402
from a2rl.reference.rewards import judge_reward  # noqa: E402
from a2rl.run.artifacts import Limits, check_artifact  # noqa: E402
from a2rl.spec.tasks import get_task  # noqa: E402
from a2rl.store.stages import StageLog  # noqa: E402
from a2rl.tasklib.prepare import ensure_prepared
from a2rl.tasklib.taskdata import read_jsonl  # noqa: E402
from test_judge import completion, stub_llm  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures" / "alpacaeval"
TASK = get_task("alpacaeval")
SHOWN = re.compile(r"# Instruction\n(.*)\n\n# Response A\n(.*)\n\n# Response B\n(.*)\n\nWhich response", re.S)


def shorter_wins(body: dict, headers: dict) -> tuple[int, dict]:
    """A judge that prefers the shorter response (ties to B): a reward that varies between completions."""
    _, a, b = SHOWN.search(body["messages"][-1]["content"]).groups()
    return 200, completion("A" if len(a) < len(b) else "B")


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("data")
    ensure_prepared(TASK, root, source=FIXTURES)
    return root


@pytest.fixture(scope="module")
def data(data_root):
    return TASK.data(data_root)


def test_judge_reward_is_the_training_judges_pairwise_verdict_in_both_orders():
    with stub_llm(shorter_wins) as (url, seen):
        reward = judge_reward(ChatClient(url, "train-judge", retries=0))
        got = reward(
            completions=[" ok\n", "a much longer answer than the reference"],
            instruction=["Say ok."] * 2,
            reference=["a fine reference"] * 2,
            prompts=["p", "p"],
        )
    assert got == [1.0, 0.0]
    assert len(seen) == 4 and {s["body"]["model"] for s in seen} == {"train-judge"}
    shown = {SHOWN.search(s["body"]["messages"][-1]["content"]).groups() for s in seen}  # sent concurrently
    assert ("Say ok.", "ok", "a fine reference") in shown and ("Say ok.", "a fine reference", "ok") in shown


def test_train_judge_without_its_model_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OUTPUT_DIR", str(tmp_path))
    assert P.main(["--train-format", "instruction_reference", "--train-judge", "http://127.0.0.1:9/v1"]) == 2
    assert "error: --train-judge needs --train-judge-model" in capsys.readouterr().out


def test_without_a_train_judge_grpo_is_skipped_in_the_log_and_the_stage_records(
    data, tiny_model, tmp_path, monkeypatch, capsys
):
    out = tmp_path / "out"
    monkeypatch.delenv("GRADING_SERVER_URL", raising=False)
    for k, v in dict(MODEL_PATH=tiny_model, DATA_PATH=data.train_dir, OUTPUT_DIR=out).items():
        monkeypatch.setenv(k, str(v))
    assert P.main(["--train-format", "instruction_reference", "--sft-steps", "0", "--grpo-steps", "3"]) == 0
    assert "stage grpo skipped: these rows are scored by a judge model" in capsys.readouterr().out
    [grpo] = StageLog.load(out / "stages.json").stages
    assert (grpo.name, grpo.steps, grpo.planned_steps, grpo.model_dir) == ("grpo", 0, 3, None)
    assert "no --train-judge" in grpo.skipped and not (out / "grpo").exists()


@pytest.mark.slow  # trains twice, then grades
def test_sft_then_grpo_with_rewards_from_the_training_judge(data_root, data, tiny_model, tmp_path):
    train = read_jsonl(data.train_dir / "train.jsonl")
    heldout = read_jsonl(data.heldout_dir / "test.jsonl")
    out = tmp_path / "out"
    env = dict(
        os.environ, MODEL_PATH=str(tiny_model), DATA_PATH=str(data.train_dir), OUTPUT_DIR=str(out), OMP_NUM_THREADS="1"
    )
    env.pop("GRADING_SERVER_URL", None)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    with stub_llm(shorter_wins) as (url, seen):
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "a2rl.reference.pipeline",
                "--train-format",
                "instruction_reference",
                "--sft-steps",
                "2",
                "--sft-batch-size",
                "2",
                "--grpo-steps",
                "2",
                "--grpo-prompts",
                "2",
                "--num-generations",
                "2",
                "--max-completion-length",
                "8",
                "--train-judge",
                url,
                "--train-judge-model",
                "train-judge",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"rewards from the judge at {url}" in proc.stdout

    # 2 steps x 2 prompts x 2 completions, each judged in both orders; only train rows reach the judge
    assert len(seen) == 2 * 2 * 2 * 2
    instructions, references = {instruction_text(r) for r in train}, {reference_text(r) for r in train}
    for s in seen:
        instruction, a, b = SHOWN.search(s["body"]["messages"][-1]["content"]).groups()
        assert instruction in instructions and (a in references or b in references)
        assert not {a, b} & {r["output"] for r in heldout}

    stages = StageLog.load(out / "stages.json")
    assert [(s.name, s.steps, s.model_dir) for s in stages.stages] == [("sft", 2, "sft"), ("grpo", 2, "grpo")]
    assert stages.route() == "SFT→GRPO"
    assert stages.stages[1].hyperparameters["reward"] == "judge_reward"
    assert stages.stages[1].hyperparameters["judge"] == {"base_url": url, "model": "train-judge"}

    # The GRPO model as the grader takes it: a valid artifact, scored on the held-out split by the grader's judge.
    check_artifact(out / "grpo", out, Limits(64, 1 << 30, 1 << 30)).close()
    with stub_llm(shorter_wins) as (grader_url, graded):
        score, details = evaluate_model(
            TASK,
            out / "grpo",
            out / "grpo",
            data_root=data_root,
            protocol="a2rl",
            options={"max_new_tokens": 8, "judge": {"base_url": grader_url, "model": "grader-judge", "retries": 0}},
        )
    assert 0.0 <= score <= 100.0 and len(graded) == 2 * len(heldout) and details["n_total"] == len(heldout)


def test_a_failing_training_judge_is_a_one_line_error(data, tiny_model, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    monkeypatch.delenv("GRADING_SERVER_URL", raising=False)
    for k, v in dict(MODEL_PATH=tiny_model, DATA_PATH=data.train_dir, OUTPUT_DIR=out).items():
        monkeypatch.setenv(k, str(v))
    with stub_llm(lambda body, headers: (400, {"error": "no such model"})) as (url, seen):
        code = P.main(
            [
                "--train-format",
                "instruction_reference",
                "--sft-steps",
                "0",
                "--grpo-steps",
                "1",
                "--grpo-prompts",
                "1",
                "--num-generations",
                "2",
                "--max-completion-length",
                "2",
                "--train-judge",
                url,
                "--train-judge-model",
                "nope",
            ]
        )
    assert code == 1 and seen  # asked once: a 400 is not retried
    assert "error: stage grpo: the training judge failed: " in capsys.readouterr().out
