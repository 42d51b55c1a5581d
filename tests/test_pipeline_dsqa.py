"""DeepSearchQA's route for the reference agent: env.py exposes the common text-env protocol with protocol a2rl's
pieces (the evaluator imports them), prepare writes expert search traces for the train questions only, the search
corpus reaches the sandboxed workspace as a read-only link (not the held-out split), and the pipeline's interactive
route trains the tiny model on the fixture and submits a model the task's evaluator scores."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from a2rl.run.isolation import choose
from a2rl.run.runsetup import agent_command
from a2rl.run.sandbox import AgentSandbox
from a2rl.run.workspace import create_workspace, linked_files
from a2rl.spec.tasks import get_task
from a2rl.tasklib.envs import TASK_ENV_NAMES, load_task_env, replay
from a2rl.tasklib.evaluator import load_evaluator
from a2rl.tasklib.leaks import markers
from a2rl.tasklib.prepare import ensure_prepared
from a2rl.tasklib.taskdata import read_jsonl
from test_judge import completion, stub_llm
from test_pipeline_envs import run_pipeline
from test_sandbox import PY, needs_bwrap

FIXTURES = Path(__file__).parent / "fixtures" / "deepsearchqa"
TASK = get_task("deepsearchqa")
ev = load_evaluator(TASK)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    return ensure_prepared(TASK, root, source=FIXTURES)


def test_env_exposes_the_protocol_with_the_graders_prompt(data):
    dsqa = load_task_env(data.train_dir / "env.py", "dsqa_workspace_env")  # the copy the agent gets
    assert all(callable(getattr(dsqa, n)) for n in TASK_ENV_NAMES)
    header = dsqa.prompt_header(data.train_dir, "0")
    assert header == ev.REACT_SYSTEM.format(max_steps=TASK.spec.eval["max_steps"])  # what the grader instructs
    assert ev.parse_action is ev.dsqa.parse_action and ev.format_results is ev.dsqa.format_results  # one copy
    assert dsqa.TRAIN_SEARCH == {k: v for k, v in TASK.spec.eval["search"].items() if k != "corpus"}
    rows = read_jsonl(data.train_dir / "train.jsonl")
    assert dsqa.train_episodes(data.train_dir) == [str(i) for i in range(len(rows))]


def test_env_steps_search_the_corpus_and_reward_a_matching_finish(data):
    dsqa = load_task_env(data.train_dir / "env.py", "dsqa_workspace_env")
    row = read_jsonl(data.train_dir / "train.jsonl")[1]
    env = dsqa.make_env(data.train_dir, "1")
    assert env.reset() == f"Question: {row['problem']}\nAnswer type: {row['answer_type']}"
    obs, reward, done, info = env.step("Search[capital of Cagoren1]")
    assert obs.startswith("[1] Cagoren1 (https://example.org/wiki/Cagoren1): ") and not done and info["valid"]
    assert env.step("look around") == (dsqa.INVALID, 0.0, False, {"won": False, "valid": False})
    assert env.step(f"Finish[It is {row['answer']}.]")[1:3] == (1.0, True)
    _, reward, done, info = env.step("Finish[Paris]")
    assert (reward, done, info["won"]) == (0.0, True, False)


@pytest.mark.parametrize(
    "gold, kind, predicted, expected",
    [
        ("Borcaca0", "Single Answer", "the capital is borcaca0.", True),
        ("Borcaca0", "Single Answer", "Borcaca", False),
        ("Lemkamor3, Gornulem3", "Set Answer", "Gornulem3 and Lemkamor3", True),
        ("Lemkamor3, Gornulem3", "Set Answer", "Lemkamor3", False),
        ("Borcaca0", "Single Answer", "", False),
    ],
)
def test_the_training_match_applies_the_judges_rule(gold, kind, predicted, expected):
    assert ev.dsqa.matches(gold, kind, predicted) is expected


def test_trajectories_are_real_expert_traces_of_train_questions_only(data):
    dsqa = load_task_env(data.train_dir / "env.py", "dsqa_workspace_env")
    train, heldout = read_jsonl(data.train_dir / "train.jsonl"), read_jsonl(data.heldout_dir / "test.jsonl")
    rows = read_jsonl(data.train_dir / "trajectories.jsonl")
    assert [r["episode"] for r in rows] == dsqa.train_episodes(data.train_dir)
    assert all(r["won"] and r["source"] == "scripted_expert" for r in rows)
    for r, q in zip(rows, train):
        assert r["actions"][0] == f"Search[{' '.join(q['problem'].split())}]" and len(r["actions"]) in (2, 3)
        assert r["actions"][-1] == f"Finish[{q['answer']}]" and r["observations"][0] == dsqa.question_turn(q)
        assert replay(dsqa.make_env(data.train_dir, r["episode"]), r["actions"]).observations == r["observations"]
    text = (data.train_dir / "trajectories.jsonl").read_text()
    assert not any(q["problem"] in text or json.dumps(q["problem"])[1:-1] in text for q in heldout)
    for path in sorted(p for p in data.train_dir.iterdir() if p.suffix in (".jsonl", ".py")):
        assert markers(data.heldout_dir).find(path.read_text()) == [], path.name


def test_the_expert_searches_key_terms_when_the_question_finds_no_answer(tmp_path):
    prep = TASK.folder / "prepare.py"
    from a2rl.tasklib.envs import load_module

    prepare = load_module(prep, "a2rl_task_deepsearchqa_prepare")
    prepare.search.build_index(
        [{"title": "Encais0", "text": "Encais0 is a small country.", "url": "u"}], tmp_path / "c.sqlite"
    )
    row = {"problem": "What is the capital city of\nEncais0?", "answer": "Borcaca0", "answer_type": "Single Answer"}
    env = ev.dsqa.SearchQAEnv(row, prepare.search.LocalSearch(tmp_path / "c.sqlite"))
    assert prepare.expert_actions(env) == [
        "Search[What is the capital city of Encais0?]",
        "Search[capital city Encais0]",
        "Finish[Borcaca0]",
    ]
    row["answer"] = "small country"  # found by the first search: no second one
    assert prepare.expert_actions(env) == ["Search[What is the capital city of Encais0?]", "Finish[small country]"]


@needs_bwrap
def test_the_sandboxed_workspace_searches_the_linked_corpus_but_not_the_heldout_split(data, tmp_path, tiny_model):
    ws = create_workspace(
        tmp_path / "scratch" / "run",
        task=TASK,
        data=data,
        model_dir=tiny_model,
        budget_s=60,
        source_tree=Path(__file__).resolve().parents[1],
    )
    corpus = ws.data / "corpus.sqlite"
    assert corpus.is_symlink() and linked_files(ws) == [(data.train_dir / "corpus.sqlite").resolve()]
    assert (data.train_dir / "corpus.sqlite").stat().st_mode & 0o200  # the shared data is not chmod-ed
    probe = textwrap.dedent(f"""
        import json, os, sys
        sys.path.insert(0, {str(ws.data)!r})
        import env
        obs = env.make_env({str(ws.data)!r}, "1").step("Search[capital of Cagoren1]")[0]
        print(json.dumps({{"obs": obs, "heldout": os.path.exists({str(data.heldout_dir / "test.jsonl")!r}),
                          "train_dir": os.path.exists({str(data.train_dir / "train.jsonl")!r})}}))
        """)
    stack = SimpleNamespace(search_dirs=lambda: [])
    with AgentSandbox(choose("bwrap"), "full", forwards=[], allow_hosts=[]) as box:
        argv = agent_command(
            box, stack, [str(PY), "-c", probe], ws, python=PY, stack_dir=tmp_path / "stack", model_dir=tiny_model
        )
        p = subprocess.run(argv, capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert p.returncode == 0, p.stderr
    seen = json.loads(p.stdout)
    assert seen["obs"].startswith("[1] Cagoren1 ") and not seen["heldout"] and not seen["train_dir"]


@pytest.mark.slow
def test_interactive_route_trains_on_dsqa_and_the_grader_scores_it(data, tmp_path, tiny_model):
    out = tmp_path / "out"
    log = run_pipeline(
        data.train_dir,
        out,
        tiny_model,
        "--protocol",
        "a2rl",
        "--sft-steps",
        "10",
        "--grpo-steps",
        "2",
        "--grpo-prompts",
        "2",
        "--num-generations",
        "2",
    )
    n = len(read_jsonl(data.train_dir / "trajectories.jsonl"))
    assert f"{n} trajectories ({n} won)" in log and "environment steps" in log
    heldout = tmp_path / "deepsearchqa" / "heldout"  # a few held-out questions: the tiny model is slow
    heldout.mkdir(parents=True)
    rows = read_jsonl(data.heldout_dir / "test.jsonl")[:4]
    (heldout / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    from a2rl.llm.inference import Generator

    with stub_llm(lambda body, headers: (200, completion("incorrect"))) as (url, _):
        options = {
            **TASK.spec.eval,
            "protocol": "a2rl",
            "max_steps": 3,
            "max_new_tokens": 24,
            "search": {**TASK.spec.eval["search"], "corpus": str(data.train_dir / "corpus.sqlite")},
            "judge": {"base_url": url, "model": "stub-judge", "retries": 0},
        }
        for stage in ("sft", "grpo"):
            result = ev.evaluate(Generator.load(out / stage), heldout, options)
            assert result["n"] == 4 and 0.0 <= result["score"] <= 100.0
