"""The reference pipeline's per-format adapters: for each train.jsonl layout and grading protocol, the SFT pairs and
GRPO rows in the prompts that protocol's grader sends (built with the graders' own builders, a2rl.tasklib.prompts),
and the reward."""

from __future__ import annotations

import typing
from collections.abc import Callable
from dataclasses import dataclass, field

from transformers import PreTrainedTokenizerBase

from a2rl.llm.chat import chat_prompt
from a2rl.reference.rewards import (
    final_number_reward,
    first_line_reward,
    paper_number_reward,
    paper_unit_test_reward,
    unit_test_reward,
)
from a2rl.spec.tasks import EvalProtocol
from a2rl.tasklib.answers import GSM8K_STOP, format_answer
from a2rl.tasklib.prompts import (
    GSM8K_SHOTS,
    Messages,
    gsm8k_paper_messages,
    gsm8k_paper_reply,
    gsm8k_prompt,
    humaneval_paper_messages,
    humaneval_paper_reply,
    instruction_messages,
)


def instruction_text(row: dict[str, str]) -> str:
    """An Alpaca row's user turn: the instruction, and its "input" where it has one."""
    return "\n\n".join(filter(None, (row["instruction"], row.get("input"))))


def reference_text(row: dict[str, str]) -> str:
    return row.get("reference", row.get("output"))


Rows = list[dict[str, str]]


@dataclass(frozen=True)
class Chat:
    """The base model's chat format as the grader renders it: the tokenizer's chat template with the run's
    chat_template_kwargs (its generation preset's, from run_meta.json; Qwen3's enable_thinking changes the prompt)."""

    tokenizer: PreTrainedTokenizerBase
    template_kwargs: dict = field(default_factory=dict)

    def prompt(self, messages: Messages) -> str:
        return chat_prompt(self.tokenizer, messages, self.template_kwargs)

    @property
    def eos(self) -> str:
        return self.tokenizer.eos_token


@dataclass(frozen=True)
class Route:
    """How one protocol's grader asks for a train.jsonl layout, so training sees that prompt: the SFT pairs
    (prompt, completion), the GRPO rows (a "prompt"; other columns reach the reward as kwargs) and the reward (None:
    no rule reward stands in for the grader's judge; GRPO then needs a judge for training, --train-judge). Chat
    prompts are rendered as the grader renders them (Chat)."""

    sft_pairs: Callable[[Rows, Chat], Rows]
    grpo_rows: Callable[[Rows, Chat], Rows]
    reward: Callable[..., list[float]] | None = None
    max_length: int = 256  # SFT sequence tokens
    max_completion_length: int = 8  # GRPO default


@dataclass(frozen=True)
class StaticFormat:
    """A train.jsonl layout: the fields every row has ("a|b": either) and its route per protocol."""

    fields: tuple[str, ...]
    routes: dict[str, Route]


def every_protocol(route: Route) -> dict[str, Route]:
    """A layout both protocols prompt alike."""
    return {p: route for p in typing.get_args(EvalProtocol)}


def gsm8k_exemplars(rows: Rows) -> Rows:
    """a2rl's exemplars: the first train rows, as prepare copies them for the grader."""
    return rows[:GSM8K_SHOTS]


def instruction_prompt(row: dict[str, str], chat: Chat) -> str:
    return chat.prompt(instruction_messages(instruction_text(row)))


STATIC_FORMATS: dict[str, StaticFormat] = {
    "qa_short": StaticFormat(
        ("prompt", "answer"),
        every_protocol(
            Route(
                lambda rows, chat: [{"prompt": r["prompt"], "completion": f" {r['answer']}\n"} for r in rows],
                lambda rows, chat: [{"prompt": r["prompt"], "answer": r["answer"]} for r in rows],
                first_line_reward,
            )
        ),
    ),
    "qa_numeric": StaticFormat(
        ("question", "answer"),
        {
            # a2rl: the 4-shot completion prompt, answered by the rationale and where the grader stops generating
            "a2rl": Route(
                lambda rows, chat: [
                    {
                        "prompt": gsm8k_prompt(gsm8k_exemplars(rows), r["question"]),
                        "completion": f" {format_answer(r['answer'])}{GSM8K_STOP}",
                    }
                    for r in rows
                ],
                lambda rows, chat: [
                    {"prompt": gsm8k_prompt(gsm8k_exemplars(rows), r["question"]), "answer": r["answer"]} for r in rows
                ],
                final_number_reward,
                max_length=4096,
                max_completion_length=256,
            ),
            # paper: the chat over paper's four exemplars, answered as they answer ("The answer is N") and EOS: paper
            # generates with no stop string, and reads the last number before a "Question:" of the model's own
            "paper": Route(
                lambda rows, chat: [
                    {
                        "prompt": chat.prompt(gsm8k_paper_messages(r["question"])),
                        "completion": gsm8k_paper_reply(r["answer"]) + chat.eos,
                    }
                    for r in rows
                ],
                lambda rows, chat: [
                    {"prompt": chat.prompt(gsm8k_paper_messages(r["question"])), "answer": r["answer"]} for r in rows
                ],
                paper_number_reward,
                max_length=4096,
                max_completion_length=256,
            ),
        },
    ),
    "code_with_tests": StaticFormat(
        ("prompt", "canonical_solution", "test", "entry_point"),
        {
            # a2rl: a raw continuation of the problem's prompt
            "a2rl": Route(
                lambda rows, chat: [
                    {"prompt": r["prompt"], "completion": r["canonical_solution"] + chat.eos} for r in rows
                ],
                lambda rows, chat: [
                    {"prompt": r["prompt"], "test": r["test"], "entry_point": r["entry_point"]} for r in rows
                ],
                unit_test_reward,
                max_length=1024,
                max_completion_length=256,
            ),
            # paper: the chat instruction, answered by the whole function in a code block
            "paper": Route(
                lambda rows, chat: [
                    {
                        "prompt": chat.prompt(humaneval_paper_messages(r["prompt"])),
                        "completion": humaneval_paper_reply(r) + chat.eos,
                    }
                    for r in rows
                ],
                lambda rows, chat: [
                    {
                        "prompt": chat.prompt(humaneval_paper_messages(r["prompt"])),
                        "problem_prompt": r["prompt"],
                        "test": r["test"],
                        "entry_point": r["entry_point"],
                    }
                    for r in rows
                ],
                paper_unit_test_reward,
                max_length=1024,
                max_completion_length=512,
            ),
        },
    ),
    # Both protocols: the instruction as the single user turn the grader prompts the policy with
    # (a2rl.tasklib.pairwise.generate_answers), answered by the reference and EOS: the grader's answer is everything
    # generated up to EOS. Alpaca's rows name the reference "output" and may add an "input" to the instruction.
    # GRPO's reward is the training judge's.
    "instruction_reference": StaticFormat(
        ("instruction", "reference|output"),
        every_protocol(
            Route(
                lambda rows, chat: [
                    {"prompt": instruction_prompt(r, chat), "completion": reference_text(r) + chat.eos} for r in rows
                ],
                lambda rows, chat: [
                    {
                        "prompt": instruction_prompt(r, chat),
                        "instruction": instruction_text(r),
                        "reference": reference_text(r),
                    }
                    for r in rows
                ],
                max_completion_length=128,
            )
        ),
    ),
}


def check_rows(fmt_name: str, rows: list[dict]) -> StaticFormat:
    """The format's definition once every row has its fields; an error naming what is missing otherwise."""
    fmt = STATIC_FORMATS[fmt_name]
    if not rows:
        raise ValueError(f"train.jsonl: no rows to train on (format {fmt_name})")
    bad = next((r for r in rows if not all(any(k in r for k in f.split("|")) for f in fmt.fields)), None)
    if bad is not None:
        raise ValueError(
            f"train.jsonl: format {fmt_name} needs fields {{{', '.join(fmt.fields)}}}; a row has {sorted(bad)}"
        )
    return fmt
