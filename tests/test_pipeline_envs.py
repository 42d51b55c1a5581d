"""The pipeline's interactive route over the common text-env protocol (a2rl.tasklib.envs): every interactive task's
env.py exposes it, each task's prepare writes expert trajectories for the train split only, the route's step
reward comes from real environment steps, and the route trains and submits on ALFWorld's and WebShop's fixtures
(on textworld: tests/test_offline_levels.py, through the launcher).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from a2rl.spec.tasks import get_task
from a2rl.tasklib.envs import TASK_ENV_NAMES, load_module, load_task_env, replay, score_actions
from a2rl.tasklib.evaluator import load_evaluator
from a2rl.tasklib.taskdata import read_jsonl

FIXTURES = Path(__file__).parent / "fixtures"
WEBSHOP = get_task("webshop")
WS_PREP = load_module(WEBSHOP.folder / "prepare.py", "a2rl_task_webshop_prepare")
TEXTWORLD = get_task("textworld")
ALFWORLD = get_task("alfworld")


def prepare_webshop(root: Path, n_heldout: int = 3) -> tuple[Path, Path]:
    """WebShop from the fixture's upstream files (9 usable goals): n_heldout graded, the rest train."""
    train, heldout = root / "train", root / "heldout"
    train.mkdir(parents=True)
    heldout.mkdir()
    held, WS_PREP.N_HELDOUT = WS_PREP.N_HELDOUT, n_heldout
    try:
        WS_PREP.prepare(train, heldout, source=FIXTURES / "webshop")
    finally:
        WS_PREP.N_HELDOUT = held
    return train, heldout


def prepare_textworld(root: Path) -> tuple[Path, Path]:
    prep = load_module(TEXTWORLD.folder / "prepare.py", "a2rl_task_textworld_prepare")
    counts = prep.N_TRAIN, prep.N_HELDOUT
    prep.N_TRAIN, prep.N_HELDOUT = 2, 2
    try:
        prep.prepare(root / "train", root / "heldout", source=FIXTURES / "textgame")
    finally:
        prep.N_TRAIN, prep.N_HELDOUT = counts
    return root / "train", root / "heldout"


def prepare_alfworld(root: Path) -> tuple[Path, Path]:
    """ALFWorld from the fixture's two hand-written games (tests/fixtures/alfworld/make_games.py): one per split."""
    (root / "train").mkdir(parents=True)
    (root / "heldout").mkdir()
    prep = load_module(ALFWORLD.folder / "prepare.py", "a2rl_task_alfworld_prepare")
    prep.prepare(root / "train", root / "heldout", source=FIXTURES / "alfworld" / "json_2.1.1")
    return root / "train", root / "heldout"


@pytest.fixture(scope="module")
def webshop(tmp_path_factory) -> tuple[Path, Path]:
    return prepare_webshop(tmp_path_factory.mktemp("webshop"))


# ---- the protocol


@pytest.mark.parametrize("task, graders_env", [("textworld", "tw"), ("alfworld", "alf"), ("webshop", "ws")])
def test_every_interactive_task_env_exposes_the_protocol(task, graders_env):
    module = load_task_env(get_task(task).folder / "env.py", f"protocol_{task}")
    assert all(callable(getattr(module, n)) for n in TASK_ENV_NAMES)
    grader = getattr(load_evaluator(get_task(task)), graders_env)  # the env module the task's evaluator plays
    episode = "games/pick_and_place_simple-SprayBottle-None-Toilet-1/trial_1"  # alfworld: examples by type
    header = module.prompt_header("data", episode)
    assert header == grader.prompt_header("data", episode) and "Action:" in header


def test_an_env_without_the_protocol_is_a_clear_error(tmp_path):
    (tmp_path / "env.py").write_text("def prompt_header(d, e): return 'x'\ndef make_env(d, e): pass\n")
    with pytest.raises(ValueError, match="lacks train_episodes, transcript of the interactive task protocol"):
        load_task_env(tmp_path / "env.py", "protocol_broken")


# ---- expert trajectories written by prepare


def test_webshop_prepare_writes_trajectories_for_train_goals_only(webshop):
    train, heldout = webshop
    ws = load_task_env(train / "env.py", "ws_workspace_env")  # the copy the agent gets
    rows = read_jsonl(train / "trajectories.jsonl")
    assert [r["episode"] for r in rows] == ws.train_episodes(train) and len(rows) == 5
    assert {r["source"] for r in rows} == {"human", "scripted_expert"}  # tests/test_webshop_demos.py: which is which
    assert all(r["won"] and r["reward"] == 1.0 for r in rows if r["source"] == "scripted_expert")
    for r in rows:  # replaying the recorded actions in the agent's environment ends the same, with the same pages
        episode = replay(ws.make_env(train, r["episode"]), r["actions"])
        assert (episode.won, episode.reward) == (r["won"], r["reward"]) and episode.observations == r["observations"]
        assert (
            r["steps"][0]["prompt"].startswith(ws.prompt_header(train, r["episode"]))
            and r["actions"][-1] == "click[buy now]"
        )
    text = (train / "trajectories.jsonl").read_text()
    graded = read_jsonl(heldout / "goals.jsonl")
    assert graded and not any(g["instruction_text"].split(", and price")[0] in text for g in graded)


def test_textworld_trajectories_follow_the_protocol(tmp_path):
    train, _ = prepare_textworld(tmp_path)
    tw = load_task_env(train / "env.py", "tw_workspace_env")
    rows = read_jsonl(train / "trajectories.jsonl")
    assert [r["episode"] for r in rows] == tw.train_episodes(train) and all(r["won"] for r in rows)
    assert all(r["source"] == "walkthrough" and not r["episode"].startswith("heldout") for r in rows)


def test_alfworld_prepare_writes_the_planner_experts_trajectories(tmp_path):
    train, heldout = prepare_alfworld(tmp_path)
    alf = load_task_env(train / "env.py", "alf_workspace_env")
    rows = read_jsonl(train / "trajectories.jsonl")
    assert [r["episode"] for r in rows] == alf.train_episodes(train) and len(rows) == 1
    assert rows[0]["won"] and rows[0]["source"] == "planner_expert"
    assert rows[0]["actions"][-1] == "move spraybottle 1 to toilet 1"  # the environment's own verb for placing
    assert rows[0]["steps"][0]["prompt"].startswith(alf.prompt_header(train, rows[0]["episode"]))
    assert "sink 1" not in (train / "trajectories.jsonl").read_text()  # the held-out game's room
    assert not list(train.rglob("*Lettuce*")) and list(heldout.rglob("*Lettuce*"))


# ---- the step reward: real environment steps, completions read as the protocol's loop reads them


@pytest.mark.parametrize("protocol, reply", [("a2rl", " {}\n"), ("paper", "Action: {}\nmore")])
def test_step_reward_scores_actions_by_real_webshop_steps(webshop, protocol, reply):
    train, _ = webshop
    expert = read_jsonl(train / "trajectories.jsonl")[0]
    history, last = tuple(expert["actions"][:-1]), expert["actions"][-1]
    items = [
        (expert["episode"], history, reply.format(last)),  # the expert's purchase: won
        (expert["episode"], history[:1], reply.format(expert["actions"][1])),  # opening the product: valid
        (expert["episode"], history[:1], reply.format("click[no such button]")),  # not on the page
        (expert["episode"], (), reply.format("buy something")),
    ]  # not an action
    assert score_actions(str(train / "env.py"), str(train), protocol, items) == [1.0, 0.1, 0.0, 0.0]
    partial = [(expert["episode"], history[:2], reply.format(last))]  # bought without the option the goal asks for
    assert 0.0 < score_actions(str(train / "env.py"), str(train), protocol, partial)[0] < 1.0


# ---- the route end to end: SFT on the trajectories, GRPO on real steps, a model the grader scores


def run_pipeline(train: Path, out: Path, model: Path, *args: str) -> str:
    env = dict(os.environ, MODEL_PATH=str(model), DATA_PATH=str(train), OUTPUT_DIR=str(out), TASK="t")
    env.pop("GRADING_SERVER_URL", None)
    proc = subprocess.run(
        [sys.executable, "-m", "a2rl.reference.pipeline", "--train-format", "env_trajectories", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def grade(task, model: Path, heldout: Path, **options) -> dict:
    """The task's grader scoring function on its held-out split, with the grader's own generator."""
    from a2rl.llm.inference import Generator

    return load_evaluator(task).evaluate(Generator.load(model), heldout, {**task.spec.eval, **options})


@pytest.mark.slow
def test_interactive_route_trains_and_submits_on_webshop(tmp_path, webshop, tiny_model):
    train, heldout = webshop
    out = tmp_path / "out"
    # protocol a2rl: paper's prompts outgrow the tiny model's 512 tokens (test_pipeline_env_protocols.py)
    log = run_pipeline(
        train,
        out,
        tiny_model,
        "--protocol",
        "a2rl",
        "--sft-steps",
        "20",
        "--grpo-steps",
        "2",
        "--grpo-prompts",
        "2",
        "--num-generations",
        "2",
    )
    assert "5 trajectories (4 won)" in log and "policy rollouts on 5 training episodes" in log  # a human one lost
    assert "environment steps" in log
    for stage in ("sft", "grpo"):
        result = grade(WEBSHOP, out / stage, heldout, max_steps=4, protocol="a2rl")
        assert result["n"] == 3 and 0.0 <= result["score"] <= 100.0


@pytest.mark.slow
def test_interactive_route_trains_and_submits_on_alfworld(tmp_path, tiny_model):
    train, heldout = prepare_alfworld(tmp_path)
    out = tmp_path / "out"
    log = run_pipeline(
        train,
        out,
        tiny_model,
        "--protocol",
        "a2rl",
        "--sft-steps",
        "20",
        "--grpo-steps",
        "2",
        "--grpo-prompts",
        "2",
        "--num-generations",
        "2",
    )
    assert "1 trajectories (1 won)" in log and "policy rollouts on 1 training episodes" in log
    assert "environment steps" in log
    result = grade(ALFWORLD, out / "grpo", heldout, max_steps=4, protocol="a2rl")
    assert result["n"] == 1 and result["score"] in (0.0, 100.0)
