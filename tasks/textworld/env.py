"""Play TextWorld games (shipped to the agent as $DATA_PATH/env.py; the grader plays held-out games with it).

import sys; sys.path.insert(0, DATA_PATH)
import env
game = env.train_games()[0]
e = env.TextWorldEnv(game); obs = e.reset(); obs, reward, done, info = e.step("open antique trunk")
episode = env.rollout(lambda prompt: " go east\\n", game)   # prompt → completion, as the grader calls it
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable

import textworld

try:  # the grader, or an agent environment with a2rl installed
    from a2rl.tasklib.envs import Episode, Fits, ReactTranscript
    from a2rl.tasklib.envs import rollout as _rollout
except ImportError:  # the agent's workspace: prepare ships a2rl/tasklib/envs.py next to this file as react.py
    from react import Episode, Fits, ReactTranscript  # type: ignore[no-redef]
    from react import rollout as _rollout

HEADER = (
    "You are playing a text adventure game. Complete the task described in the first observation. "
    'After each observation, write one game command after "Action:", e.g. "go east", '
    '"open antique trunk", "take coin", "put milk on stove".'
)


def prompt_header(data_dir: str | Path, episode: str) -> str:
    """The common protocol (a2rl/tasklib/envs.py): one header for every game."""
    return HEADER


MAX_NEW_TOKENS = 32  # per action: task.yaml's eval.max_new_tokens (a test checks)
INFOS = textworld.EnvInfos(
    won=True, lost=True, score=True, max_score=True, admissible_commands=True, extras=["walkthrough"]
)
_WORDS = re.compile(r"[A-Za-z]{2}")


def clean(feedback: str) -> str:
    """Game text without the ASCII-art banner, the trailing prompt and status line, or runs of blank lines."""
    text = feedback.split("\n>", 1)[0]
    lines = [ln.rstrip() for ln in text.splitlines() if _WORDS.search(ln) or not ln.strip()]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


class TextWorldEnv:
    """Gym-like: reset() → observation; step(action) → (observation, reward, done, info). reward is the score
    gained by the action; info holds won, lost, score, max_score and admissible_commands."""

    def __init__(self, game: str | Path):
        self.game = str(game)
        self._env = textworld.start(self.game, request_infos=INFOS)
        self.walkthrough: list[str] = []

    def reset(self) -> str:
        state = self._env.reset()
        self.walkthrough = list(state["extra.walkthrough"])
        self._score, self._admissible = state["score"], state["admissible_commands"]
        return clean(state.feedback)

    def step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        state, score, done = self._env.step(action)
        reward, self._score = float(score - self._score), score
        info = {k: state[k] for k in ("won", "lost", "score", "max_score", "admissible_commands")}
        info["valid"], self._admissible = action in self._admissible, state["admissible_commands"]
        return clean(state.feedback), reward, bool(done or state["won"] or state["lost"]), info

    def close(self) -> None:
        self._env.close()


def train_games(data_dir: str | Path | None = None) -> list[Path]:
    """The training games (next to this file in the workspace)."""
    return sorted((Path(data_dir) if data_dir else Path(__file__).parent).glob("games/*.z8"))


def train_episodes(data_dir: str | Path) -> list[str]:
    """The common protocol (a2rl/tasklib/envs.py): a training game is its path under data_dir."""
    return [f"games/{g.name}" for g in train_games(data_dir)]


def make_env(data_dir: str | Path, episode: str) -> TextWorldEnv:
    return TextWorldEnv(Path(data_dir) / episode)


def transcript(data_dir: str | Path, episode: str, protocol: str, env: TextWorldEnv | None = None) -> ReactTranscript:
    """The common protocol: a game as the grader's loop prompts for it. TextWorld is not in the paper's table, so
    both protocols grade with the one ReAct loop (the evaluator plays it through `play`)."""
    return ReactTranscript(env or make_env(data_dir, episode), HEADER, MAX_NEW_TOKENS)


def rollout(
    policy_fn: Callable[[str], str], game: str | Path, *, max_steps: int = 50, fits: Fits | None = None
) -> Episode:
    """Play one game with a prompt → completion policy, with the grader's prompt; episode.won is success."""
    env = TextWorldEnv(game)
    try:
        return _rollout(policy_fn, env, HEADER, max_steps=max_steps, fits=fits)
    finally:
        env.close()
