"""Parity fixture for gsm8k's `paper` protocol, from OpenCompass's own code (pip install --no-deps opencompass
into a separate venv; see tools/parity/README.md).

Writes a2rl/tasklib/gsm8k_paper_fewshot.json (the four exemplars of configs/datasets/gsm8k/gsm8k_gen_1d7fe4.py) and
tests/fixtures/parity/gsm8k.json: model outputs, each with the prediction, reference and verdict of OpenCompass's
gsm8k_postprocess, gsm8k_dataset_postprocess and Gsm8kEvaluator.is_equal. The functions are taken from the
installed opencompass/datasets/gsm8k.py and run as they are (importing the package would pull in torch and
every dataset's dependencies).

Run: /tmp/parity-venv/bin/python tools/parity/gsm8k.py
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import json
import re
from pathlib import Path

from common import REPO, upstream_functions, write_fixture

SUFFIX = "\nLet's think step by step\nAnswer:"

# (model output, gold solution): how models answer, and the cases where extraction rules part
CASES = [
    ("Janet sells 16-3-4=9 eggs.\nShe makes 9*2=18 dollars.\nThe answer is 18\n", "...\n#### 18"),
    ("It buys 24*50=1,200 pencils.\nThe answer is 1,200", "...\n#### 1,200"),
    ("It buys 24*50 = 1200 pencils.\nThe answer is 1200\n", "...\n#### 1,200"),
    ("The total is $1,000.\nThe answer is $1,000.", "...\n#### 1000"),
    ("Each piece is 10/4 = 2.5 meters.\nThe answer is 2.5", "...\n#### 2.5"),
    ("Each piece is 10/4 = 2.50 meters.\nThe answer is 2.50", "...\n#### 2.5"),
    ("She pays 2*0.75+0.5 = 2.00 dollars.\nThe answer is 2.00", "...\n#### 2"),
    ("The temperature is 4-9 = -5 degrees.\nThe answer is -5", "...\n#### -5"),
    ("Her balance is 30-37.50 = -7.50.\nThe answer is -7.5", "...\n#### -7.5"),
    (
        "He has 375+8 = 383 coins.\nThe answer is 383\n\nQuestion: Tom has 5 apples. How many?\nAnswer: 5",
        "...\n#### 383",
    ),
    ("So 12 in all.\nQuestion: Anna has 3 cats and 2 dogs.", "...\n#### 12"),
    ("First 3, then 4, so 12 in all.", "...\n#### 12"),
    ("The answer is 12 apples, 3 of them red.", "...\n#### 12"),
    ("#### 72", "...\n#### 72"),
    ("I cannot solve this.", "...\n#### 7"),
    ("", "...\n#### 7"),
    ("Step 1: 5,6 and 7.\nThe answer is 7", "...\n#### 7"),
    ("The answer is 42.\n\nThe rest is 3 more.", "...\n#### 42"),
    ("18 eggs at $2 each, 36 dollars in all.\nThe answer is 36.0", "...\n#### 36"),
    ("The answer is 3.5 pizzas", "...\n#### 3.5"),
    ("The answer is 3.50 pizzas", "...\n#### 3.5"),
    ("It costs 1,215 - 15 = 1,200.\nThe answer is 1,200", "...\n#### 1200"),
]


def paper_exemplars(config: Path) -> list[dict[str, str]]:
    """The HUMAN/BOT rounds of the config before the final question, as {question, answer}."""
    rounds = [
        {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords}
        for node in ast.walk(ast.parse(config.read_text()))
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", None) == "dict"
        and {kw.arg for kw in node.keywords} == {"role", "prompt"}
    ]
    assert rounds[-1] == {"role": "HUMAN", "prompt": "Question: {question}" + SUFFIX}, rounds[-1]
    shots = []
    for human, bot in zip(rounds[:-1:2], rounds[1:-1:2]):
        assert (human["role"], bot["role"]) == ("HUMAN", "BOT")
        shots.append(
            {"question": human["prompt"].removeprefix("Question: ").removesuffix(SUFFIX), "answer": bot["prompt"]}
        )
    max_out_len = re.search(r"max_out_len\s*=\s*(\d+)", config.read_text())
    assert max_out_len and max_out_len.group(1) == "512", "the config's max_out_len is no longer 512"
    return shots


def main() -> None:
    package = Path(importlib.util.find_spec("opencompass").origin).parent
    shots = paper_exemplars(package / "configs" / "datasets" / "gsm8k" / "gsm8k_gen_1d7fe4.py")
    (REPO / "a2rl" / "tasklib" / "gsm8k_paper_fewshot.json").write_text(json.dumps(shots, indent=1) + "\n")
    up = upstream_functions(
        package / "datasets" / "gsm8k.py", ["gsm8k_postprocess", "gsm8k_dataset_postprocess", "Gsm8kEvaluator"]
    )
    is_equal = up["Gsm8kEvaluator"].is_equal
    cases = []
    for output, gold in CASES:
        pred, ref = up["gsm8k_postprocess"](output), up["gsm8k_dataset_postprocess"](gold)
        cases.append(
            {
                "output": output,
                "gold": gold,
                "prediction": pred,
                "reference": ref,
                "correct": bool(is_equal(None, pred, ref)),
            }
        )
    write_fixture(
        "gsm8k",
        {
            "upstream": f"opencompass {importlib.metadata.version('opencompass')}: configs/datasets/gsm8k/"
            "gsm8k_gen_1d7fe4.py, datasets/gsm8k.py (gsm8k_postprocess, gsm8k_dataset_postprocess, "
            "Gsm8kEvaluator.is_equal)",
            "exemplars": shots,
            "max_out_len": 512,
            "cases": cases,
        },
    )


if __name__ == "__main__":
    main()
