"""The pairwise protocol the judge-based tasks share (alpacaeval, localjudge) and the reference agent's judge
rewards: the policy answers each instruction, a judge (a2rl.llm.judge) compares each answer with a reference in
both presentation orders."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from a2rl.llm.chat import MAX_TOP_LOGPROBS, policy_prompt
from a2rl.llm.judge import ChatClient, Completion, EngineJudge
from a2rl.tasklib.prompts import Messages, instruction_messages

PAIRWISE_SYSTEM = (
    "You are an impartial judge of instruction following. You see an instruction and two responses to it, A and B. "
    "Decide which response serves the user better: correct, helpful, honest and to the point. Do not let the "
    "order of the responses or their length sway you. Reply with a single letter: A or B."
)
PAIRWISE_MAX_TOKENS = 1  # the verdict is the first token; its logprobs weigh A against B


def pairwise_messages(instruction: str, a: str, b: str) -> Messages:
    return [
        {"role": "system", "content": PAIRWISE_SYSTEM},
        {
            "role": "user",
            "content": f"# Instruction\n{instruction}\n\n# Response A\n{a}\n\n# Response B\n{b}\n\n"
            "Which response is better? Answer A or B.",
        },
    ]


def prefers_first(c: Completion) -> float | None:
    """P(the judge prefers response A): from the first token's logprobs where the endpoint returns them (as
    AlpacaEval 2.0 weighs its judge's tokens), else from the letter written; None when it gave neither."""
    mass = {"A": 0.0, "B": 0.0}
    for token, logprob in c.first_token_logprobs:
        if token.strip() in mass:
            mass[token.strip()] += math.exp(logprob)
    if mass["A"] + mass["B"] > 0:
        return mass["A"] / (mass["A"] + mass["B"])
    return {"A": 1.0, "B": 0.0}.get(c.text.strip()[:1])


@dataclass(frozen=True)
class Comparison:
    answers: list[str]  # the policy's answers, stripped
    preferences: list[float]  # P(answer beats reference), both presentation orders averaged
    unparsed: int  # verdicts with neither logprobs nor a letter, counted as ties


def generate_answers(generator: Any, instructions: Sequence[str], *, max_new_tokens: int, batch_size: int) -> list[str]:
    """The policy's answers: each instruction as one user turn in its chat template, greedy, stripped."""
    prompts = [policy_prompt(generator, instruction_messages(i)) for i in instructions]
    return [
        a.strip() for a in generator.generate(prompts, max_new_tokens=max_new_tokens, batch_size=batch_size, stop=None)
    ]


def compare_to_references(
    generator: Any,
    instructions: Sequence[str],
    references: Sequence[str],
    client: ChatClient | EngineJudge,
    *,
    max_new_tokens: int,
    batch_size: int,
) -> Comparison:
    """Answer each instruction with the policy (see generate_answers), then have the judge compare each
    answer with its reference twice, once in each position, so that a judge's order bias cancels out."""
    answers = generate_answers(generator, instructions, max_new_tokens=max_new_tokens, batch_size=batch_size)
    return Comparison(answers, *judge_against_references(client, instructions, answers, references))


def judge_against_references(
    client: ChatClient, instructions: Sequence[str], answers: Sequence[str], references: Sequence[str]
) -> tuple[list[float], int]:
    """P(answer beats reference) per instruction, judged in both presentation orders and averaged; and the
    number of verdicts with neither logprobs nor a letter (counted as ties)."""
    conversations = []
    for instruction, answer, reference in zip(instructions, answers, references, strict=True):
        conversations += [
            pairwise_messages(instruction, answer, reference),
            pairwise_messages(instruction, reference, answer),
        ]
    verdicts = [
        prefers_first(c)
        for c in client.chat_many(conversations, max_tokens=PAIRWISE_MAX_TOKENS, top_logprobs=MAX_TOP_LOGPROBS)
    ]
    unparsed = sum(v is None for v in verdicts)
    votes = [0.5 if v is None else v for v in verdicts]
    return [(first + 1 - second) / 2 for first, second in zip(votes[::2], votes[1::2])], unparsed


def win_rate_summary(c: Comparison, references: Sequence[str]) -> dict[str, Any]:
    """AlpacaEval's head-to-head numbers (win rate and its standard error in percent)."""
    n = len(c.preferences)
    return {
        "win_rate": 100 * statistics.fmean(c.preferences),
        "standard_error": 100 * statistics.stdev(c.preferences) / math.sqrt(n) if n > 1 else 0.0,
        "n_total": n,
        "n_wins": sum(p > 0.5 for p in c.preferences),
        "n_draws": sum(p == 0.5 for p in c.preferences),
        "avg_length": statistics.fmean(map(len, c.answers)),
        "reference_avg_length": statistics.fmean(map(len, references)),
        "unparsed_verdicts": c.unparsed,
    }
