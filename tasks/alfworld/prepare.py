"""Split ALFWorld's json_2.1.1 folder: train/ games visible to the agent, valid_unseen/ (134 games) graded.

`source` is the json_2.1.1 folder that `alfworld-download` fetches from GitHub (not reachable from every site).
train/ also gets env.py and react.py (the environment and the grader's ReAct loop) and trajectories.jsonl: ALFWorld's
planner expert (Fast Downward on each training game's PDDL, through alfworld's AlfredExpert) played to the end.
Needs alfworld==0.4.2 with textworld[pddl].
"""

from __future__ import annotations

import shutil
from pathlib import Path

import a2rl.tasklib.envs
from a2rl.tasklib.taskdata import write_jsonl

alf = a2rl.tasklib.envs.load_module(Path(__file__).with_name("env.py"), "a2rl_task_alfworld_env")


def expert_trajectory(train_dir: Path, episode_id: str) -> dict:
    """The planner's plan from the game's start, replayed; a game it cannot solve is kept with won false."""
    env = alf.AlfworldEnv(Path(train_dir) / episode_id, expert=True)
    env.reset()
    episode = a2rl.tasklib.envs.replay(env, env.expert_plan)
    return a2rl.tasklib.envs.trajectory_record(
        episode_id, episode, alf.prompt_header(train_dir, episode_id), "planner_expert"
    )


def prepare(train_dir: Path, heldout_dir: Path, source: Path | None = None) -> None:
    if source is None:
        raise RuntimeError(
            "run `pip install alfworld && alfworld-download`, then "
            "`a2rl prepare alfworld --source ~/.cache/alfworld/json_2.1.1`"
        )
    shutil.copytree(Path(source) / "train", Path(train_dir) / "games")
    shutil.copytree(Path(source) / "valid_unseen", Path(heldout_dir) / "games")
    for name in ("env.py", "react_prompts.json"):
        shutil.copyfile(Path(__file__).with_name(name), Path(train_dir) / name)
    shutil.copyfile(a2rl.tasklib.envs.__file__, Path(train_dir) / "react.py")
    write_jsonl(
        Path(train_dir) / "trajectories.jsonl",
        [expert_trajectory(Path(train_dir), e) for e in alf.train_episodes(train_dir)],
    )
