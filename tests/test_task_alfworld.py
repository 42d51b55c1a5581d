"""ALFWorld: prepare splits the json_2.1.1 layout by folder; protocol a2rl's 2-shot prompt uses the env's "move X to Y";
scoring runs the shared ReAct loop against a fake environment. The fixture's two games are hand-written (make_games.py):
prepare plays them with ALFWorld's planner expert, so the tests that prepare need alfworld installed."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from a2rl.spec.tasks import get_task
from a2rl.tasklib.envs import load_module
from a2rl.tasklib.evaluator import load_evaluator
from fakes import FakeGenerator

SOURCE = Path(__file__).parent / "fixtures" / "alfworld" / "json_2.1.1"  # two hand-written playable games
TASK = get_task("alfworld")
EVAL = load_evaluator(TASK)


class FakeAlfEnv:
    """Wins on "move apple 1 to countertop 1", like ALFWorld; answers "Nothing happens." otherwise."""

    def __init__(self, game: Path, max_steps: int):
        self.game = game

    def reset(self) -> str:
        return f"You see a countertop 1 ({self.game.parent.name}).\nYour task is to: put some apple on countertop."

    def step(self, action: str):
        won = action == "move apple 1 to countertop 1"
        return (
            ("You move the apple 1 to the countertop 1." if won else "Nothing happens."),
            float(won),
            won,
            {"won": won},
        )


@pytest.fixture
def prepared(tmp_path) -> SimpleNamespace:
    (tmp_path / "train").mkdir()
    (tmp_path / "heldout").mkdir()
    load_module(TASK.folder / "prepare.py", "alf_prep").prepare(tmp_path / "train", tmp_path / "heldout", source=SOURCE)
    return SimpleNamespace(train=tmp_path / "train", heldout=tmp_path / "heldout")


def test_prepare_splits_by_folder(prepared):
    alf = EVAL.alf
    train, held = alf.games(prepared.train / "games"), alf.games(prepared.heldout / "games")
    assert [g.parent.name for g in train] == ["pick_and_place_simple-SprayBottle-None-Toilet-422"]
    assert [g.parent.name for g in held] == ["pick_clean_then_place_in_recep-Lettuce-None-Fridge-11"]
    assert all((g / "traj_data.json").is_file() for g in train + held)
    assert not list(prepared.train.rglob("*Lettuce*"))
    assert all((prepared.train / f).exists() for f in TASK.spec.train_files)


def test_prepare_without_source_says_how_to_get_the_data(tmp_path):
    with pytest.raises(RuntimeError, match="alfworld-download"):
        load_module(TASK.folder / "prepare.py", "alf_prep").prepare(tmp_path / "t", tmp_path / "h")


def test_few_shot_places_objects_with_move_x_to_y(prepared):
    game = EVAL.alf.games(prepared.heldout / "games")[0]
    header = EVAL.alf.a2rl_header(game)
    actions = re.findall(r"^Action: (.*)$", header, re.M)
    placing = [a for a in actions if re.match(r"(put|move) ", a)]
    assert placing and all(re.fullmatch(r"move \w+ \d+ to \w+ \d+", a) for a in placing)
    assert "move X to Y" in EVAL.alf.HEADER and "in/on" not in header


@pytest.mark.parametrize(
    "completion, score",
    [(" move apple 1 to countertop 1\nObservation: x", 100.0), (" put apple 1 on countertop 1", 0.0)],
)
def test_scoring_with_a_fake_env(prepared, completion, score):
    gen = FakeGenerator(completion)
    result = EVAL.evaluate(
        gen, prepared.heldout, {"max_steps": 4, "protocol": "a2rl", "env_factory": "test_task_alfworld:FakeAlfEnv"}
    )
    assert result["score"] == score and result["n"] == 1
    assert result["mean_steps"] == (1 if score else 4)
    game = EVAL.alf.games(prepared.heldout / "games")[0]
    assert gen.prompts[0].startswith(EVAL.alf.a2rl_header(game))
    assert gen.prompts[0].endswith("Your task is to: put some apple on countertop.\nAction:")
