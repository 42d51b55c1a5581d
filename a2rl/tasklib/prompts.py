"""The prompts the static tasks' graders send, per protocol, and the replies they read best. The graders
(tasks/*/evaluator.py) and the reference agent's routes (a2rl.reference.pipeline) both build them here, so the agent
trains on exactly the prompt it is graded on. Chat prompts are messages: whoever holds the tokenizer renders them
(a2rl.llm.chat.chat_prompt, with the graded model's chat template)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import cache
from pathlib import Path

from a2rl.llm.chat import Messages
from a2rl.tasklib.answers import format_answer, gsm8k_paper_reference

# ---------------------------------------------------------------- GSM8K
GSM8K_SHOTS = 4  # protocol a2rl: the first train rows are the exemplars (tasks/gsm8k/prepare.py)
GSM8K_SEPARATOR = "\n\n"  # a2rl: between exemplars
GSM8K_PAPER_FEWSHOT = Path(__file__).with_name("gsm8k_paper_fewshot.json")  # OpenCompass gsm8k_gen_1d7fe4's exemplars
GSM8K_PAPER_SUFFIX = "\nLet's think step by step\nAnswer:"


def gsm8k_prompt(exemplars: Sequence[dict[str, str]], question: str) -> str:
    """a2rl's completion prompt: the exemplars (calculator annotations removed), then the question."""
    shots = "".join(
        f"Question: {e['question']}\nAnswer: {format_answer(e['answer'])}{GSM8K_SEPARATOR}" for e in exemplars
    )
    return f"{shots}Question: {question}\nAnswer:"


@cache
def _paper_exemplars() -> tuple[tuple[str, str], ...]:
    return tuple((s["question"], s["answer"]) for s in json.loads(GSM8K_PAPER_FEWSHOT.read_text()))


def gsm8k_paper_messages(question: str) -> Messages:
    """paper: the exemplar conversation, then the question."""
    messages = []
    for shot_question, shot_answer in _paper_exemplars():
        messages += [
            {"role": "user", "content": f"Question: {shot_question}{GSM8K_PAPER_SUFFIX}"},
            {"role": "assistant", "content": shot_answer},
        ]
    return messages + [{"role": "user", "content": f"Question: {question}{GSM8K_PAPER_SUFFIX}"}]


def gsm8k_paper_reply(answer: str) -> str:
    """A GSM8K solution as paper's exemplars answer: the reasoning, then "The answer is N" (no thousands
    separator, which paper's extraction misreads)."""
    reasoning = format_answer(answer).split("#### ")[0].rstrip()
    return f"{reasoning}\nThe answer is {gsm8k_paper_reference(answer)}\n"


# ---------------------------------------------------------------- HumanEval
HUMANEVAL_INSTRUCTION = (
    "Read the following function signature and docstring, and fully implement the function "
    "described. Your response should only contain the code for this function."
)


def humaneval_paper_messages(prompt: str) -> Messages:
    """paper: OpenCompass's instruction and the problem's prompt, one user turn."""
    return [{"role": "user", "content": f"{HUMANEVAL_INSTRUCTION}\n{prompt}"}]


def humaneval_paper_reply(problem: dict[str, str]) -> str:
    """The whole function in one fenced block: paper grades the block's code after the prompt, so the completed
    function redefines the prompt's stub (a body alone would lose its first line's indent to paper's lstrip)."""
    return f"```python\n{(problem['prompt'] + problem['canonical_solution']).rstrip()}\n```"


# ---------------------------------------------------------------- instructions (alpacaeval, localjudge)
def instruction_messages(instruction: str) -> Messages:
    """Both protocols: the instruction as the single user turn."""
    return [{"role": "user", "content": instruction}]
