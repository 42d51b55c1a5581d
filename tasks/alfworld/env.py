"""ALFWorld games (shipped to the agent as $DATA_PATH/env.py; the grader plays valid_unseen with it).

A game is a folder `<task-type>-.../trial_*/` holding game.tw-pddl and traj_data.json. The environment wants
"move X to Y" for placing objects (the reference's few-shot "put X in/on Y" is rejected by it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

try:  # the grader, or an agent environment with a2rl installed
    from a2rl.tasklib.envs import Episode, Fits, rollout as _rollout
except ImportError:  # the agent's workspace: prepare ships a2rl/envs.py next to this file as react.py
    from react import Episode, Fits, rollout as _rollout  # type: ignore[no-redef]

HEADER = ("Interact with a household to solve a task. Write one action after \"Action:\": go to X, take X from Y, "
          "move X to Y, open X, close X, clean X with Y, heat X with Y, cool X with Y, use X, examine X, "
          "inventory, look, or \"think: ...\" to reason. Here are two examples.\n\n")
EXAMPLES = """Observation: You are in the middle of a room. Looking quickly around you, you see a cabinet 1, a countertop 1, a drawer 1, and a sinkbasin 1.
Your task is to: put some spraybottle on countertop.
Action: think: To solve the task, I need to find a spraybottle, take it, then move it to countertop 1. It is likely in a cabinet.
Observation: OK.
Action: go to cabinet 1
Observation: On the cabinet 1, you see a spraybottle 2.
Action: take spraybottle 2 from cabinet 1
Observation: You pick up the spraybottle 2 from the cabinet 1.
Action: go to countertop 1
Observation: On the countertop 1, you see nothing.
Action: move spraybottle 2 to countertop 1
Observation: You move the spraybottle 2 to the countertop 1.

Observation: You are in the middle of a room. Looking quickly around you, you see a countertop 1, a drawer 1, a fridge 1, and a sinkbasin 1.
Your task is to: put a clean lettuce in fridge.
Action: think: I need to find a lettuce, clean it with sinkbasin 1, then move it to fridge 1.
Observation: OK.
Action: go to countertop 1
Observation: On the countertop 1, you see a lettuce 1.
Action: take lettuce 1 from countertop 1
Observation: You pick up the lettuce 1 from the countertop 1.
Action: go to sinkbasin 1
Observation: On the sinkbasin 1, you see nothing.
Action: clean lettuce 1 with sinkbasin 1
Observation: You clean the lettuce 1 using the sinkbasin 1.
Action: go to fridge 1
Observation: The fridge 1 is closed.
Action: open fridge 1
Observation: You open the fridge 1. The fridge 1 is open. In it, you see nothing.
Action: move lettuce 1 to fridge 1
Observation: You move the lettuce 1 to the fridge 1.
"""
PROMPT_HEADER = HEADER + EXAMPLES


def games(root: str | Path) -> list[Path]:
    """Every game folder (one holding game.tw-pddl) under root."""
    return sorted(p.parent for p in Path(root).rglob("game.tw-pddl"))


class AlfworldEnv:
    """Gym-like over ALFWorld's TextWorld environment: reset() → observation; step(action) →
    (observation, reward, done, info) with info["won"] and info["admissible_commands"]."""

    def __init__(self, game: str | Path, max_steps: int = 50, *, expert: bool = False):
        """expert: also run ALFWorld's planner expert (AlfredExpert, type "planner": Fast Downward on the game's
        PDDL), whose plan from the current state is then `expert_plan` (prepare's trajectories; never graded)."""
        import textworld
        import textworld.gym
        from alfworld.agents.environment.alfred_tw_env import (AlfredDemangler, AlfredExpert, AlfredExpertType,
                                                               AlfredInfos)

        infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
        wrappers = [AlfredDemangler(), AlfredInfos]
        if expert:
            infos.extras.append("expert_plan")
            # By keyword: the first positional parameter is the wrapped env (alfworld's own AlfredTWEnv passes the
            # type positionally, so it silently gets the handcoded expert).
            wrappers.append(AlfredExpert(expert_type=AlfredExpertType.PLANNER))
        env_id = textworld.gym.register_games([str(Path(game) / "game.tw-pddl")], infos, batch_size=1,
                                              asynchronous=False, max_episode_steps=max_steps, wrappers=wrappers)
        self._env = textworld.gym.make(env_id)
        self.expert_plan: list[str] = []

    def _observe(self, infos: dict) -> None:
        self._admissible = infos["admissible_commands"][0]
        self.expert_plan = list(infos.get("extra.expert_plan", [[]])[0])

    def reset(self) -> str:
        obs, infos = self._env.reset()
        self._observe(infos)
        return obs[0].split("\n\n", 1)[-1].strip()  # drop the "-= Welcome to TextWorld, ALFRED! =-" banner

    def step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        obs, scores, dones, infos = self._env.step([action])
        info = {"won": bool(infos["won"][0]), "admissible_commands": infos["admissible_commands"][0],
                "valid": action in self._admissible}
        self._observe(infos)
        return obs[0].strip(), float(scores[0]), bool(dones[0]), info


def train_episodes(data_dir: str | Path) -> list[str]:
    """The common protocol (a2rl/envs.py): a training game is its folder under data_dir."""
    return [str(g.relative_to(data_dir)) for g in games(Path(data_dir) / "games")]


def make_env(data_dir: str | Path, episode: str) -> AlfworldEnv:
    return AlfworldEnv(Path(data_dir) / episode)


def rollout(policy_fn: Callable[[str], str], game: str | Path, *, max_steps: int = 50,
            fits: Fits | None = None) -> Episode:
    """Play one game with a prompt → completion policy and the grader's 2-shot prompt."""
    return _rollout(policy_fn, AlfworldEnv(game, max_steps), PROMPT_HEADER, max_steps=max_steps, fits=fits)
