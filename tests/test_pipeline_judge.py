"""The pipeline agent's static route on a judge task (localjudge): SFT pairs in the grader's own prompt format, no
GRPO (no rule reward), and a clear error for train rows it does not know."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from transformers import AutoTokenizer  # noqa: E402

from a2rl.reference.pipeline import STATIC_FORMATS, Chat, check_rows  # noqa: E402
from a2rl.tasklib.taskdata import read_jsonl
from fakes import FakeGenerator  # noqa: E402

JUDGED = STATIC_FORMATS["instruction_reference"].routes["paper"]  # both protocols prompt alike
from a2rl.llm.inference import Generator  # noqa: E402
from a2rl.llm.judge import Completion  # noqa: E402
from a2rl.spec.tasks import TaskData, get_task  # noqa: E402
from a2rl.tasklib.pairwise import compare_to_references  # noqa: E402
from a2rl.tasklib.prepare import ensure_prepared  # noqa: E402

TASK = get_task("localjudge")


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> TaskData:
    return ensure_prepared(TASK, tmp_path_factory.mktemp("data"))


class AlwaysA:
    def chat_many(self, conversations, **kwargs):
        return [Completion("A", (), "fake", None) for _ in conversations]


def test_sft_pairs_are_the_graders_prompts_answered_by_the_reference(data, tiny_model):
    tok = AutoTokenizer.from_pretrained(tiny_model)
    rows = read_jsonl(data.train_dir / "train.jsonl")[:50]
    assert JUDGED.reward is None  # a judge task: no rule reward
    pairs = JUDGED.sft_pairs(rows, Chat(tok))
    policy = FakeGenerator("4", tokenizer=tok)  # it remembers the prompts the judge protocol feeds the policy
    compare_to_references(
        policy,
        [r["instruction"] for r in rows],
        [r["reference"] for r in rows],
        AlwaysA(),
        max_new_tokens=64,
        batch_size=64,
    )
    assert [p["prompt"] for p in pairs] == policy.prompts
    for pair, row in zip(pairs, rows):
        assert pair["completion"] == row["reference"] + tok.eos_token  # the grader's answer ends at EOS
        # As TRL tokenizes them: the prompt's tokens (those the grader feeds) are where the sequence starts.
        prompt_ids = tok(pair["prompt"])["input_ids"]
        assert tok(pair["prompt"] + pair["completion"])["input_ids"][: len(prompt_ids)] == prompt_ids


def test_rows_not_of_the_declared_format_are_a_clear_error():
    assert check_rows("qa_short", [{"prompt": "1+1=", "answer": "2"}]).routes["paper"].reward is not None
    with pytest.raises(
        ValueError,
        match=r"format qa_short needs fields \{prompt, answer\}; a row has "
        r"\['answer', 'question'\]",
    ):
        check_rows("qa_short", [{"question": "1+1?", "answer": "2"}])  # gsm8k's rows
    with pytest.raises(ValueError, match="no rows"):
        check_rows("qa_numeric", [])


def run_pipeline(data: Path, model: Path, out: Path, *args: str) -> subprocess.CompletedProcess:
    # One thread: the tiny model gains nothing from more, and on a busy machine their spin-waits cost minutes.
    env = dict(
        os.environ,
        MODEL_PATH=str(model),
        DATA_PATH=str(data),
        OUTPUT_DIR=str(out),
        TASK="localjudge",
        OMP_NUM_THREADS="1",
    )
    env.pop("GRADING_SERVER_URL", None)
    return subprocess.run(
        [sys.executable, "-m", "a2rl.reference.pipeline", "--train-format", "instruction_reference", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow  # trains
def test_pipeline_trains_on_judge_rows_and_skips_grpo(data, tiny_model, tmp_path):
    out = tmp_path / "out"
    proc = run_pipeline(data.train_dir, tiny_model, out, "--sft-steps", "30")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2000 train rows, format instruction_reference {instruction, reference|output}" in proc.stdout
    assert "stage grpo skipped: these rows are scored by a judge model" in proc.stdout
    assert (out / "sft" / "model.safetensors").is_file() and not (out / "grpo").exists()

    # Prompted as the grader prompts it, the base model rambles to the token limit and strips to nothing; after
    # 30 steps the trained one writes a short answer and ends it: on average within half the limit (the exact
    # lengths vary with the CPU's float arithmetic: 91 tokens of 256 on CI's machine, over the old bound of 64).
    rows = read_jsonl(data.heldout_dir / "test.jsonl")[:16]
    for model, answered in ((tiny_model, False), (out / "sft", True)):
        policy = Generator.load(model)
        answers = compare_to_references(
            policy,
            [r["instruction"] for r in rows],
            [r["reference"] for r in rows],
            AlwaysA(),
            max_new_tokens=16,
            batch_size=16,
        ).answers
        tokens = sum(len(policy.tokenizer(a, add_special_tokens=False)["input_ids"]) for a in answers)
        assert (all(answers) and tokens < 16 // 2 * len(rows)) == answered, (model, tokens, answers)

    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "train.jsonl").write_text(json.dumps({"question": "1+1?", "answer": "2"}) + "\n")
    proc = run_pipeline(tmp_path / "bad", tiny_model, tmp_path / "out2", "--sft-steps", "1")
    assert proc.returncode == 2 and "error: train.jsonl: format instruction_reference needs fields" in proc.stdout
