"""gsm8k's `paper` protocol against OpenCompass (tests/fixtures/parity/gsm8k.json, written by tools/parity/gsm8k.py
from OpenCompass's own code): the same exemplars, prompt, length and no stop; the same prediction, reference and
verdict on every fixture output. Where `a2rl` differs, and why, is listed."""

from __future__ import annotations

import json

import pytest
from transformers import AutoTokenizer

from a2rl.spec.tasks import get_task
from a2rl.tasklib.evaluator import load_evaluator
from a2rl.tasklib.prompts import GSM8K_PAPER_FEWSHOT
from conftest import FIXTURES
from fakes import FakeGenerator

EVAL = load_evaluator(get_task("gsm8k"))
PARITY = json.loads((FIXTURES / "parity" / "gsm8k.json").read_text())
CASES = PARITY["cases"]

# output → why a2rl's verdict differs from OpenCompass's
DECIMAL = "numeric: OpenCompass compares a decimal reference as text"
A2RL_DIFFERS = {
    "It buys 24*50=1,200 pencils.\nThe answer is 1,200": "comma-aware: OpenCompass reads 1,200 as 200",
    "The total is $1,000.\nThe answer is $1,000.": "comma-aware: OpenCompass reads $1,000 as 000",
    "It costs 1,215 - 15 = 1,200.\nThe answer is 1,200": "comma-aware: OpenCompass reads 1,200 as 200",
    "Each piece is 10/4 = 2.50 meters.\nThe answer is 2.50": DECIMAL,
    "The answer is 3.50 pizzas": DECIMAL,
    "The answer is 12 apples, 3 of them red.": "the number after 'answer is', not the last one",
    "The answer is 42.\n\nThe rest is 3 more.": "the number after 'answer is', not the last one",
    "So 12 in all.\nQuestion: Anna has 3 cats and 2 dogs.": (
        "no cut at 'Question:' (a2rl stops generating at '\\n\\nQuestion:'): the last number is 2"
    ),
}


@pytest.mark.parametrize("case", CASES, ids=range(len(CASES)))
def test_paper_agrees_with_opencompass(case):
    assert EVAL.paper_prediction(case["output"]) == case["prediction"]
    assert EVAL.paper_reference(case["gold"]) == case["reference"]
    assert EVAL.paper_correct(case["prediction"], case["reference"]) is case["correct"]


def test_where_a2rl_differs_and_why():
    differs = {
        c["output"]
        for c in CASES
        if (EVAL.extract_number(c["output"]) == EVAL.extract_number(c["gold"])) is not c["correct"]
    }
    assert differs == set(A2RL_DIFFERS)
    agree = len(CASES) - len(differs)
    assert (agree, len(CASES)) == (14, 22)  # the figures in docs/tasks.md's protocol table


def test_paper_exemplars_are_opencompass_s():
    assert json.loads(GSM8K_PAPER_FEWSHOT.read_text()) == PARITY["exemplars"]


class Recorder(FakeGenerator):
    def generate(self, prompts, **kwargs):
        self.kwargs = kwargs
        return super().generate(prompts, **kwargs)


def test_paper_prompt_is_the_chat_conversation_with_no_stop(tiny_model, tmp_path):
    tok = AutoTokenizer.from_pretrained(tiny_model)
    (tmp_path / "test.jsonl").write_text(json.dumps({"question": "What is 6*7?", "answer": "6*7=42\n#### 42"}) + "\n")
    gen = Recorder("6*7 = 42\nThe answer is 42\n", tokenizer=tok)
    assert EVAL.evaluate(gen, tmp_path, {"protocol": "paper"})["score"] == 100.0
    messages = []
    for shot in PARITY["exemplars"]:
        messages += [
            {"role": "user", "content": f"Question: {shot['question']}\nLet's think step by step\nAnswer:"},
            {"role": "assistant", "content": shot["answer"]},
        ]
    messages.append({"role": "user", "content": "Question: What is 6*7?\nLet's think step by step\nAnswer:"})
    assert gen.prompts == [tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)]
    assert gen.kwargs["max_new_tokens"] == PARITY["max_out_len"] == 512
    assert (gen.kwargs["stop"], gen.kwargs["add_special_tokens"]) == (None, False)
