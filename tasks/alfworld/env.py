"""ALFWorld games (shipped to the agent as $DATA_PATH/env.py; the grader plays valid_unseen with it).

A game is a folder `<task-type>-.../trial_*/` holding game.tw-pddl and traj_data.json; the graded games are those
ALFWorld's AlfredTWEnv loads (graded_games). Both protocols prompt with two ReAct examples of the game's task type
(react_prompts.json: ReAct's alfworld prompts, as the reference ships them). Protocol `paper` uses them verbatim in
ReAct's raw "> action" format: 12 of their 127 actions are "put X in/on Y", which ALFWorld >= 0.4 rejects (it wants
"move X to Y"). Protocol `a2rl` rewrites those to "move X to Y" and uses the shared ReAct format (react.py).
`transcript` builds either protocol's loop for a game: the grader plays valid_unseen through it, the reference agent
builds its training prompts with it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable

try:  # the grader, or an agent environment with a2rl installed
    from a2rl.tasklib.envs import Episode, Fits, ReactTranscript, Render, Transcript
    from a2rl.tasklib.envs import rollout as _rollout
except ImportError:  # the agent's workspace: prepare ships a2rl/tasklib/envs.py next to this file as react.py
    from react import Episode, Fits, ReactTranscript, Render, Transcript  # type: ignore[no-redef]
    from react import rollout as _rollout

HEADER = (
    'Interact with a household to solve a task. Write one action after "Action:": go to X, take X from Y, '
    "move X to Y, open X, close X, clean X with Y, heat X with Y, cool X with Y, use X, examine X, "
    'inventory, look, or "think: ..." to reason. Here are two examples.\n\n'
)

# ALFWorld's AlfredTWEnv: the task types it plays (config task_types [1..6]); the reference's example key per type
TASK_TYPES = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)
TASK_PREFIXES = {
    "pick_and_place": "put",
    "pick_clean_then_place": "clean",
    "pick_heat_then_place": "heat",
    "pick_cool_then_place": "cool",
    "look_at_obj": "examine",
    "pick_two_obj": "puttwo",
}
PAPER_HEAD, PAPER_TAIL = "Interact with a household to solve a task. Here are two examples.\n", "\nHere is the task.\n"
MAX_NEW_TOKENS = {"paper": 100, "a2rl": 48}  # per action: task.yaml's eval.<protocol>.max_new_tokens (a test checks)


def games(root: str | Path) -> list[Path]:
    """Every game folder (one holding game.tw-pddl) under root."""
    return sorted(p.parent for p in Path(root).rglob("game.tw-pddl"))


def graded_games(root: str | Path) -> list[Path]:
    """The games AlfredTWEnv.collect_game_files keeps: no movable receptacles or sliced objects, a known task type,
    and a game file marked solvable."""
    kept = []
    for game in games(root):
        if "movable" in str(game) or "Sliced" in str(game):
            continue
        traj = json.loads((game / "traj_data.json").read_text(encoding="utf-8"))
        if traj.get("task_type") in TASK_TYPES and json.loads((game / "game.tw-pddl").read_text()).get("solvable"):
            kept.append(game)
    return kept


def example_key(game: str | Path) -> str:
    """The reference's example set for a game: the first TASK_PREFIXES entry its task folder starts with."""
    name = Path(game).parent.name
    return next(key for prefix, key in TASK_PREFIXES.items() if name.startswith(prefix))


def examples(game: str | Path) -> list[str]:
    """The two examples for the game's task type, in the reference's order (_1 then _0)."""
    prompts = json.loads(Path(__file__).with_name("react_prompts.json").read_text(encoding="utf-8"))
    key = example_key(game)
    return [prompts[f"react_{key}_1"], prompts[f"react_{key}_0"]]


def paper_prompt(game: str | Path, observation: str) -> str:
    """Protocol `paper`: the reference's prompt before the first action; each step then appends
    " <action>\\n<observation>\\n>"."""
    return PAPER_HEAD + "".join(examples(game)) + PAPER_TAIL + observation + "\n>"


def process_ob(observation: str) -> str:
    """ReAct's clean-up of an observation: "You arrive at loc N. " dropped."""
    return observation[observation.find(". ") + 2 :] if observation.startswith("You arrive at loc ") else observation


def valid_actions(example: str) -> str:
    """An example with "put X in/on Y" (rejected by ALFWorld >= 0.4) written as "move X to Y"."""
    example = re.sub(r"put (\w+ \d+) in/on (\w+ \d+)", r"move \1 to \2", example)
    example = re.sub(r"You put the (\w+ \d+) in/on the (\w+ \d+)\.", r"You move the \1 to the \2.", example)
    return example.replace("put it in/on", "move it to")


def a2rl_header(game: str | Path) -> str:
    """Protocol `a2rl`: the game type's two examples with valid actions, in the shared ReAct format."""
    blocks = []
    for example in examples(game):
        first, *steps = valid_actions(example).strip("\n").split("\n> ")
        lines = [f"Observation: {first}"]
        for step in steps:
            action, _, observation = step.partition("\n")
            lines += [f"Action: {action}", f"Observation: {observation}"] if observation else [f"Action: {action}"]
        blocks.append("\n".join(lines) + "\n")
    return HEADER + "\n".join(blocks)


class PaperTranscript(Transcript):
    """Protocol `paper`'s loop for one game (the reference's alfworld_run): the raw prompt grows by
    " <action>\\n<observation>\\n>" per step; a "think:" action is stepped in the game too (costing a step) and
    shown as "OK."; the action is the completion's first line, stripped."""

    max_new_tokens = MAX_NEW_TOKENS["paper"]

    def __init__(self, env, game: str | Path):
        self.env, self.text = env, paper_prompt(game, env.reset())
        self.actions, self.done, self.won, self.reward = [], False, False, 0.0

    def prompt(self, render: Render | None = None, fits: Fits | None = None) -> str:
        return self.text

    @staticmethod
    def read(completion: str) -> str:
        return completion.split("\n", 1)[0].strip()

    def reply(self, action: str) -> str:
        return f" {action}\n"

    def step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        observation, reward, done, info = self.env.step(action)
        shown = "OK." if action.startswith("think:") else process_ob(observation)
        self.text += f" {action}\n{shown}\n>"
        self.actions.append(action)
        self.done, self.reward = done, reward
        if done:
            self.won = bool(info["won"])
        return observation, reward, done, info


def game_transcript(game: str | Path, env, protocol: str) -> Transcript:
    """A game's episode in `env` (reset here) as the protocol's loop prompts for it."""
    if protocol == "paper":
        return PaperTranscript(env, game)
    if protocol == "a2rl":
        return ReactTranscript(env, a2rl_header(game), MAX_NEW_TOKENS["a2rl"])
    raise ValueError(f"alfworld: unknown protocol {protocol!r} (paper or a2rl)")


class AlfworldEnv:
    """Gym-like over ALFWorld's TextWorld environment: reset() → observation; step(action) →
    (observation, reward, done, info) with info["won"] and info["admissible_commands"]."""

    def __init__(self, game: str | Path, max_steps: int = 50, *, expert: bool = False):
        """expert: also run ALFWorld's planner expert (AlfredExpert, type "planner": Fast Downward on the game's
        PDDL), whose plan from the current state is then `expert_plan` (prepare's trajectories; never graded)."""
        import textworld
        import textworld.gym
        from alfworld.agents.environment.alfred_tw_env import (
            AlfredDemangler,
            AlfredExpert,
            AlfredExpertType,
            AlfredInfos,
        )

        infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
        wrappers = [AlfredDemangler(), AlfredInfos]
        if expert:
            infos.extras.append("expert_plan")
            # By keyword: the first positional parameter is the wrapped env (alfworld's own AlfredTWEnv passes the
            # type positionally, so it silently gets the handcoded expert).
            wrappers.append(AlfredExpert(expert_type=AlfredExpertType.PLANNER))
        env_id = textworld.gym.register_games(
            [str(Path(game) / "game.tw-pddl")],
            infos,
            batch_size=1,
            asynchronous=False,
            max_episode_steps=max_steps,
            wrappers=wrappers,
        )
        self._env = textworld.gym.make(env_id)
        self.expert_plan: list[str] = []

    def _observe(self, infos: dict) -> None:
        self._admissible = infos["admissible_commands"][0]
        self.expert_plan = list(infos.get("extra.expert_plan", [[]])[0])

    def reset(self) -> str:
        obs, infos = self._env.reset()
        self._observe(infos)
        return "\n".join(obs[0].split("\n\n")[1:])  # the reference's: no "-= Welcome to ... =-" banner

    def step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        obs, scores, dones, infos = self._env.step([action])
        info = {
            "won": bool(infos["won"][0]),
            "admissible_commands": infos["admissible_commands"][0],
            "valid": action in self._admissible,
        }
        self._observe(infos)
        return obs[0].strip(), float(scores[0]), bool(dones[0]), info


def train_episodes(data_dir: str | Path) -> list[str]:
    """The common protocol (a2rl/tasklib/envs.py): a training game is its folder under data_dir."""
    return [str(g.relative_to(data_dir)) for g in games(Path(data_dir) / "games")]


def prompt_header(data_dir: str | Path, episode: str) -> str:
    """The common protocol: protocol `a2rl`'s header, whose examples follow the game's type."""
    return a2rl_header(Path(data_dir) / episode)


def make_env(data_dir: str | Path, episode: str) -> AlfworldEnv:
    return AlfworldEnv(Path(data_dir) / episode)


def transcript(data_dir: str | Path, episode: str, protocol: str, env: AlfworldEnv | None = None) -> Transcript:
    """The common protocol: a training game as the protocol's grader loop prompts for it (env: reused, reset)."""
    return game_transcript(Path(data_dir) / episode, env or make_env(data_dir, episode), protocol)


def rollout(
    policy_fn: Callable[[str], str], game: str | Path, *, max_steps: int = 50, fits: Fits | None = None
) -> Episode:
    """Play one game with a prompt → completion policy and the grader's 2-shot prompt of protocol `a2rl`."""
    return _rollout(policy_fn, AlfworldEnv(game, max_steps), a2rl_header(game), max_steps=max_steps, fits=fits)
