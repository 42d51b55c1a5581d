"""Score GSM8K: 4-shot chain of thought, greedy, exact match on the final number, under one of two protocols.

`paper` is OpenCompass's gsm8k_gen_1d7fe4, as the reference runs it: the model's chat template over four fixed
exemplar conversations (a2rl/tasklib/gsm8k_paper_fewshot.json: "Question: ...\\nLet's think step by step\\nAnswer:"
→ reasoning ending "The answer is N"), up to 512 new tokens, no stop string; the prediction is the last number
before the first "Question:" (OpenCompass's regex has no thousands separator: "1,000" reads as "000", which is 0),
and it is right when it equals the reference's text or its value is within 1e-6 of int(reference).

`a2rl` is a raw completion prompt of four train exemplars as "Question: ...\\nAnswer: <reasoning>\\n#### <number>",
up to 256 new tokens, stopping at the next "\\n\\nQuestion:" (not at the first blank line, which cut
multi-paragraph answers); the answer is the number after "####" (see extract_number), commas understood.
"""

from __future__ import annotations

import json
from pathlib import Path

from a2rl.llm.chat import policy_prompt

# The prompts and checks live in a2rl.tasklib, shared with the reference agent, which trains on these prompts.
from a2rl.tasklib.answers import GSM8K_STOP as STOP
from a2rl.tasklib.answers import extract_number
from a2rl.tasklib.answers import (
    gsm8k_paper_correct as paper_correct,
)
from a2rl.tasklib.answers import (
    gsm8k_paper_prediction as paper_prediction,
)
from a2rl.tasklib.answers import (
    gsm8k_paper_reference as paper_reference,
)
from a2rl.tasklib.prompts import gsm8k_paper_messages as paper_messages
from a2rl.tasklib.prompts import gsm8k_prompt as build_prompt

MAX_NEW_TOKENS = {"paper": 512, "a2rl": 256}


def _read_jsonl(path: Path) -> list[dict[str, str]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def evaluate(generator, heldout_dir: Path, options: dict) -> dict:
    protocol = options["protocol"]
    rows = _read_jsonl(Path(heldout_dir) / "test.jsonl")
    if options.get("limit") is not None:
        rows = rows[: int(options["limit"])]
    max_new_tokens = int(options.get("max_new_tokens") or MAX_NEW_TOKENS[protocol])
    batch_size = int(options.get("batch_size", 32))
    if protocol == "paper":
        completions = generator.generate(
            [policy_prompt(generator, paper_messages(r["question"])) for r in rows],
            max_new_tokens=max_new_tokens,
            batch_size=batch_size,
            stop=None,
            add_special_tokens=not getattr(generator.tokenizer, "chat_template", None),
        )
        predicted = [paper_prediction(c) for c in completions]
        verdicts = [paper_correct(p, paper_reference(r["answer"])) for p, r in zip(predicted, rows)]
        no_number = sum(p == "NULL" for p in predicted)
    else:
        exemplars = _read_jsonl(Path(heldout_dir) / "fewshot.jsonl")
        completions = generator.generate(
            [build_prompt(exemplars, r["question"]) for r in rows],
            max_new_tokens=max_new_tokens,
            batch_size=batch_size,
            stop=STOP,
        )
        answers = [extract_number(c) for c in completions]
        verdicts = [a is not None and a == extract_number(r["answer"]) for a, r in zip(answers, rows)]
        no_number = sum(a is None for a in answers)
    correct = sum(verdicts)
    return {"score": 100.0 * correct / len(rows), "n": len(rows), "correct": correct, "no_number": no_number}
