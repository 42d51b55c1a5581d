import importlib.util
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from a2rl.spec.sweep import default_agent_python
from a2rl.tasklib.taskdata import read_jsonl
from fakes import FakeGenerator

TASK_DIR = Path(__file__).resolve().parents[1] / "tasks" / "arith"


def load_task_module(name: str):
    spec = importlib.util.spec_from_file_location(f"arith_{name}", TASK_DIR / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


prepare = load_task_module("prepare").prepare
evaluator = load_task_module("evaluator")


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("arith")
    prepare(root / "train", root / "heldout")
    return root


def test_task_yaml_points_at_existing_files(prepared):
    spec = yaml.safe_load((TASK_DIR / "task.yaml").read_text())
    assert spec["name"] == "arith" and spec["kind"] == "rule" and spec["offline"] is True
    for key in ("description", "evaluator", "prepare"):
        assert (TASK_DIR / spec[key]).is_file()
    for name in spec["train_files"]:
        assert (prepared / "train" / name).is_file()


def test_the_demos_fixed_heldout_seed_draws_the_same_heldout_rows_in_every_data_root(tmp_path, monkeypatch):
    """tools/demo.sh's A2RL_HELDOUT_SEED: the demo's table is the same on every machine (never for a benchmark)."""
    monkeypatch.setenv("A2RL_HELDOUT_SEED", "12345")
    for root in ("a", "b"):
        prepare(tmp_path / root / "train", tmp_path / root / "heldout")
    assert (tmp_path / "a/heldout/test.jsonl").read_bytes() == (tmp_path / "b/heldout/test.jsonl").read_bytes()
    assert (tmp_path / "a/heldout/SEED").read_text() == "12345\n"


def test_train_is_the_same_everywhere_heldout_is_each_data_roots_own(prepared, tmp_path):
    prepare(tmp_path / "train", tmp_path / "heldout")
    assert (tmp_path / "train/train.jsonl").read_bytes() == (prepared / "train/train.jsonl").read_bytes()
    assert (tmp_path / "heldout/test.jsonl").read_bytes() != (prepared / "heldout/test.jsonl").read_bytes()
    assert not list((prepared / "train").rglob("SEED"))  # the secret stays with the held-out split
    train = read_jsonl(prepared / "train" / "train.jsonl")
    test = read_jsonl(prepared / "heldout" / "test.jsonl")
    assert len(train) == 2000 and len(test) == 200
    train_prompts = {r["prompt"] for r in train}
    assert len(train_prompts) == len(train)
    assert not train_prompts & {r["prompt"] for r in test}


def test_rows_follow_the_prompt_convention_and_answers_are_right(prepared):
    for row in read_jsonl(prepared / "train" / "train.jsonl"):
        assert row["prompt"].startswith("Question: ") and row["prompt"].endswith("\nAnswer:")
        a, b = map(int, re.findall(r"\d+", row["prompt"]))
        assert row["answer"].isdigit() and int(row["answer"]) in (a + b, abs(a - b))


@pytest.mark.parametrize(
    ("completion", "expected"),
    [(" 12\n", "12"), (" 12", "12"), ("12\nQuestion: 3", "12"), (" 7 apples\n", "7 apples"), ("\n12", ""), ("", "")],
)
def test_extract_answer(completion, expected):
    assert evaluator.extract_answer(completion) == expected


def right_first(answers: list[str], n_right: int) -> FakeGenerator:
    """Answers correctly for the first `n_right` prompts and wrongly after."""
    return FakeGenerator(replies=[f" {a}\n" if i < n_right else " -1\n" for i, a in enumerate(answers)])


def test_evaluate_counts_exact_matches(prepared):
    heldout = prepared / "heldout"
    answers = [r["answer"] for r in read_jsonl(heldout / "test.jsonl")]
    assert evaluator.evaluate(right_first(answers, 50), heldout, {}) == {"score": 25.0, "n": 200, "correct": 50}
    assert evaluator.evaluate(right_first(answers, 200), heldout, {})["score"] == 100.0


@pytest.mark.slow  # > 5 s: the tiny model end to end
def test_untrained_tiny_model_scores_about_zero(prepared, tmp_path):
    from a2rl.llm.inference import Generator
    from a2rl.store.tinymodel import build_tiny_model

    generator = Generator.load(build_tiny_model(tmp_path / "model"))
    spec = yaml.safe_load((TASK_DIR / "task.yaml").read_text())
    result = evaluator.evaluate(generator, prepared / "heldout", spec["eval"])
    assert result["n"] == 200
    assert result["score"] <= 5.0


ATTACK = """
import importlib.util, json, random, sys
spec = importlib.util.spec_from_file_location("p", sys.argv[1])
p = importlib.util.module_from_spec(spec)
spec.loader.exec_module(p)
from a2rl.tasklib.taskdata import distinct_rows
def rows(seed, n):
    return [r["prompt"] for r in distinct_rows(random.Random(seed), p.make_problem, "prompt", n)]
print(json.dumps({"train": rows(p.SEED, p.N_HELDOUT + p.N_TRAIN),
                  "neighbours": [rows(s, p.N_HELDOUT) for s in range(p.SEED - 300, p.SEED + 300)],
                  "secret": rows(int(sys.argv[2]), p.N_HELDOUT) if len(sys.argv) > 2 else []}))
"""


def attack(*args: str) -> dict:
    """The agent's environment with the public source: every split the public seed, and the 600 seeds
    around it, make; `args` may add a seed to try."""
    agent_python = default_agent_python()
    if not agent_python.is_file():
        pytest.skip(f"no agents' environment at {agent_python}")
    out = subprocess.run(
        [str(agent_python), "-c", ATTACK, str(TASK_DIR / "prepare.py"), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(TASK_DIR.parents[1])},
        check=True,
    )
    return json.loads(out.stdout)


def test_the_public_generator_cannot_rebuild_the_heldout_split(prepared):
    """Given the public prepare script and every train row, the agent's Python regenerates the train split
    (the attack works) but, from the public seed or any seed near it, no more held-out rows than chance; the
    data root's secret seed (heldout/SEED, out of the agent's reach) is what makes them."""
    heldout = {r["prompt"] for r in read_jsonl(prepared / "heldout" / "test.jsonl")}
    train = [r["prompt"] for r in read_jsonl(prepared / "train" / "train.jsonl")]
    got = attack((prepared / "heldout" / "SEED").read_text().strip())
    assert set(train) <= set(got["train"])  # the attacker has the generator right
    assert set(got["secret"][: len(heldout)]) & heldout  # the secret seed is what would rebuild it
    # a random split of 200 of the ~87,000 problems shares about 0.5 with the held-out one
    assert max(len(heldout & set(rows)) for rows in [got["train"], *got["neighbours"]]) <= 10
