"""GSM8K: prepare from the published parquet layout (fixture), the number extractor, and the scorer end to end
with a generator that knows the gold answers (100) and with the tiny model (~0)."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from a2rl.grading.evaluate import evaluate_model
from a2rl.spec.tasks import CANARY, TaskData, get_task
from a2rl.tasklib.answers import format_answer
from a2rl.tasklib.evaluator import load_evaluator
from a2rl.tasklib.prepare import ensure_prepared
from a2rl.tasklib.prompts import GSM8K_SEPARATOR
from a2rl.tasklib.taskdata import read_jsonl
from conftest import FIXTURES
from fakes import FakeGenerator

SOURCE = FIXTURES / "gsm8k"
TASK = get_task("gsm8k")
EVAL = load_evaluator(TASK)


def fixture_rows(split: str) -> list[dict]:
    return pq.read_table(SOURCE / "main" / f"{split}-00000-of-00001.parquet").to_pylist()


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("data")
    ensure_prepared(TASK, root, source=SOURCE)
    return root


@pytest.fixture(scope="module")
def data(data_root) -> TaskData:
    return TASK.data(data_root)


def gold_generator(rows: list[dict]) -> FakeGenerator:
    """Answers each prompt's last question with its gold reasoning."""
    gold = {r["question"]: r["answer"] for r in rows}
    return FakeGenerator(
        script=lambda p: " " + format_answer(gold[p.rsplit("Question: ", 1)[1].removesuffix("\nAnswer:")]), cut=True
    )


def test_prepare_is_deterministic_and_exposes_only_train(tmp_path, data):
    again = ensure_prepared(TASK, tmp_path, source=SOURCE)
    for part in ("train_dir", "heldout_dir"):
        ours, theirs = getattr(data, part), getattr(again, part)
        assert sorted(p.name for p in ours.iterdir()) == sorted(p.name for p in theirs.iterdir())
        for f in ours.iterdir():  # the canary is new with every preparation, by design
            assert (f.read_bytes() == (theirs / f.name).read_bytes()) is (f.name != CANARY), f

    assert [p.name for p in data.train_dir.iterdir()] == ["train.jsonl"]
    assert read_jsonl(data.train_dir / "train.jsonl") == fixture_rows("train")
    test = read_jsonl(data.heldout_dir / "test.jsonl")
    assert test == fixture_rows("test")  # gold answers ("#### ...") kept for the grader
    assert all("\n#### " in r["answer"] for r in test)
    train_text = (data.train_dir / "train.jsonl").read_text()
    assert not any(r["question"] in train_text for r in test)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("#### 72", "72"),
        ("She picks 24 more.\n#### 72", "72"),
        ("#### 72 apples, then 5 more", "72"),
        ("The answer is 72.", "72"),
        ("So the Answer is $1,200 in total", "1200"),
        ("#### 1,200", "1200"),
        ("It costs $1,200.", "1200"),
        ("#### -5", "-5"),
        ("The temperature is -5 degrees", "-5"),
        ("#### 3.50", "3.5"),
        ("#### 3.5", "3.5"),
        ("#### 2.00", "2"),
        ("#### -0", "0"),
        ("First 3, then 4, so 12 in all. Done.", "12"),
        ("5,6", "6"),  # not a thousands separator: two numbers, the last wins
        ("no number here", None),
        ("", None),
        ("#### none", None),
    ],
)
def test_extract_number(text, expected):
    assert EVAL.extract_number(text) == expected


def test_gold_answers_score_100_through_the_a2rl_prompt(data):
    """Every gold solution, multi-paragraph ones included, is right once cut at the a2rl stop string (the old
    stop at the first blank line cut the fixture's two-paragraph solution before its answer)."""
    test = read_jsonl(data.heldout_dir / "test.jsonl")
    assert any("\n\n" in r["answer"] for r in test)
    gen = gold_generator(test)
    result = EVAL.evaluate(gen, data.heldout_dir, {"protocol": "a2rl", "max_new_tokens": 16})
    assert result["score"] == 100.0
    assert (result["n"], result["correct"], result["no_number"]) == (len(test), len(test), 0)
    assert gen.stops == [EVAL.STOP]

    # Answers that belong to other questions score 0: the scorer compares each prompt with its own gold.
    shifted = gold_generator(
        [{"question": r["question"], "answer": s["answer"]} for r, s in zip(test, test[1:] + test[:1])]
    )
    assert EVAL.evaluate(shifted, data.heldout_dir, {"protocol": "a2rl"})["score"] == 0.0


def test_prompt_has_four_train_exemplars(data):
    train = {r["question"]: r["answer"] for r in read_jsonl(data.train_dir / "train.jsonl")}
    test = read_jsonl(data.heldout_dir / "test.jsonl")
    gen = gold_generator(test)
    EVAL.evaluate(gen, data.heldout_dir, {"protocol": "a2rl", "limit": 2})
    assert len(gen.prompts) == 2
    for prompt, row in zip(gen.prompts, test):
        *shots, target = prompt.split(GSM8K_SEPARATOR)
        assert len(shots) == 4
        for shot in shots:
            question, answer = shot.removeprefix("Question: ").split("\nAnswer: ")
            assert format_answer(train[question]) == answer  # from train, annotations removed
            assert "<<" not in answer and "\n#### " in answer
        assert target == f"Question: {row['question']}\nAnswer:"
        assert not any(r["question"] in "".join(shots) for r in test)


def test_tiny_model_scores_about_zero(data_root, tiny_model):
    score, details = evaluate_model(
        TASK, tiny_model, tiny_model, data_root=data_root, options={"max_new_tokens": 8, "batch_size": 8}
    )
    assert details["n"] == len(fixture_rows("test"))
    assert score <= 20.0  # at most one lucky number out of five
