"""ALFWorld's protocols: the games AlfredTWEnv loads; `paper` = the reference's raw ReAct loop with the game type's
examples verbatim (its "put X in/on Y" quirk kept), `a2rl` = the same examples with valid actions."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from a2rl.spec.tasks import get_task
from a2rl.tasklib.evaluator import load_evaluator
from fakes import FakeGenerator
from test_task_alfworld import SOURCE, FakeAlfEnv

TASK = get_task("alfworld")
EVAL = load_evaluator(TASK)
alf = EVAL.alf
KEYS = [f"react_{t}_{k}" for t in ("put", "clean", "heat", "cool", "puttwo", "examine") for k in (0, 1)]


class CountingEnv(FakeAlfEnv):
    """FakeAlfEnv that counts the actions it is sent and prefixes "You arrive at loc 3. " like ALFWorld 0.3."""

    sent: list[str] = []

    def step(self, action: str):
        CountingEnv.sent.append(action)
        obs, reward, done, info = super().step(action)
        return f"You arrive at loc 3. {obs}", reward, done, info


def _game(root: Path, task_dir: str, task_type: str, solvable: bool = True) -> Path:
    game = root / task_dir / "trial_T1"
    game.mkdir(parents=True)
    (game / "traj_data.json").write_text(json.dumps({"task_type": task_type}))
    (game / "game.tw-pddl").write_text(json.dumps({"solvable": solvable}))
    return game


def test_graded_games_are_those_alfredtwenv_loads(tmp_path):
    kept = _game(tmp_path, "pick_clean_then_place_in_recep-Lettuce-None-Fridge-11", "pick_clean_then_place_in_recep")
    _game(tmp_path, "pick_and_place_with_movable_recep-Pen-Bowl-Desk-1", "pick_and_place_with_movable_recep")
    _game(tmp_path, "pick_heat_then_place_in_recep-AppleSliced-None-Fridge-1", "pick_heat_then_place_in_recep")
    _game(tmp_path, "look_at_obj_in_light-Book-None-DeskLamp-1", "look_at_obj_in_light", solvable=False)
    _game(tmp_path, "some_new_type-Book-None-Desk-1", "some_new_type")
    assert alf.graded_games(tmp_path) == [kept] and len(alf.games(tmp_path)) == 5


def test_the_references_examples_hold_12_put_in_on_actions_of_127_and_a2rl_fixes_them():
    prompts = json.loads((TASK.folder / "react_prompts.json").read_text())
    actions = [line[2:] for key in KEYS for line in prompts[key].split("\n") if line.startswith("> ")]
    acts = [a for a in actions if not a.startswith("think:")]
    assert len(acts) == 127 and len([a for a in acts if re.fullmatch(r"put \w+ \d+ in/on \w+ \d+", a)]) == 12
    fixed = [line[2:] for key in KEYS for line in alf.valid_actions(prompts[key]).split("\n") if line.startswith("> ")]
    assert not [a for a in fixed if "in/on" in a]
    assert len([a for a in fixed if re.fullmatch(r"move \w+ \d+ to \w+ \d+", a)]) == 12


def _evaluate(tmp_path, gen, protocol, max_steps=4) -> dict:
    _game(tmp_path / "games", "pick_two_obj_and_place-Apple-None-CounterTop-1", "pick_two_obj_and_place")
    CountingEnv.sent = []
    return EVAL.evaluate(
        gen,
        tmp_path,
        {
            **TASK.spec.eval,
            "max_steps": max_steps,
            "protocol": protocol,
            "env_factory": "test_protocol_alfworld:CountingEnv",
        },
    )


def test_paper_is_the_references_raw_react_loop(tmp_path):
    gen = FakeGenerator(
        replies=[
            " think: find the apple\n> go",
            "put apple 1 in/on countertop 1",
            "look",
            " move apple 1 to countertop 1\nmore",
        ]
    )
    result = _evaluate(tmp_path, gen, "paper")
    prompts = json.loads((TASK.folder / "react_prompts.json").read_text())
    first = gen.prompts[0]
    assert first == (
        alf.PAPER_HEAD
        + prompts["react_puttwo_1"]
        + prompts["react_puttwo_0"]
        + alf.PAPER_TAIL
        + "You see a countertop 1 (pick_two_obj_and_place-Apple-None-CounterTop-1).\nYour task is to: "
        "put some apple on countertop.\n>"
    )
    assert gen.prompts[3].endswith(
        "> think: find the apple\nOK.\n> put apple 1 in/on countertop 1\nNothing happens.\n> look\nNothing happens.\n>"
    )  # "You arrive at loc 3. " dropped
    assert CountingEnv.sent[0] == "think: find the apple"  # a thought is stepped in the game, as the reference does
    assert result["score"] == 100.0 and result["mean_steps"] == 4.0
    assert result["per_type"] == {"puttwo": {"successes": 1, "n": 1}}
    assert set(gen.stops) == {"\n"}


def test_a2rl_plays_the_same_games_with_valid_examples(tmp_path):
    gen = FakeGenerator(reply=" put apple 1 in/on countertop 1")
    result = _evaluate(tmp_path, gen, "a2rl")
    assert result["score"] == 0.0 and result["per_type"] == {"puttwo": {"successes": 0, "n": 1}}
    assert gen.prompts[0].startswith(alf.HEADER + "Observation: You are in the middle of a room.")
    assert "Action: move creditcard 2 to dresser 1\n" in gen.prompts[0]


def test_an_unknown_protocol_is_a_one_line_error(tmp_path):
    with pytest.raises(ValueError, match="alfworld: unknown protocol 'x'"):
        EVAL.evaluate(FakeGenerator(reply="x"), SOURCE / "valid_unseen", {"protocol": "x"})
