"""The pipeline agent's interactive route on the offline text-game task (tests/fixtures/textgame: 2 training and 2
held-out Coin Collector games): the SFT warm-up on the expert trajectories wins both training games (the base
model: none), then GRPO steps real environments. Held-out success over the full task's 48 training games is
checked through a sweep in tests/test_offline_levels.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("textworld")
pytest.importorskip("trl")

from a2rl.tasklib.envs import generator_policy, load_module, play  # noqa: E402
from a2rl.spec.tasks import get_task  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures" / "textgame"
TASK = get_task("textworld")
MAX_STEPS = 15  # walkthroughs take 2-6 actions


class ScoreTracking:
    """The task's environment, remembering the game's score (progress short of a win)."""

    def __init__(self, tw, game: Path):
        self.env, self.score = tw.TextWorldEnv(game), 0

    def reset(self) -> str:
        return self.env.reset()

    def step(self, action: str):
        obs, reward, done, info = self.env.step(action)
        self.score = info["score"]
        return obs, reward, done, info


def play_split(model_dir: Path, split_dir: Path) -> tuple[int, int]:
    """(games won, score points earned) greedily, with the grader's prompts and action budget."""
    from a2rl.grading.inference import Generator

    tw = TASK.evaluator.tw
    generate, fits = generator_policy(Generator.load(model_dir), {"max_new_tokens": 32})
    envs = [ScoreTracking(tw, g) for g in sorted((split_dir / "games").glob("*.z8"))]
    try:
        episodes = play(generate, envs, [tw.HEADER] * len(envs), max_steps=MAX_STEPS, fits=fits)
    finally:
        for e in envs:
            e.env.close()
    return sum(e.won for e in episodes), sum(e.score for e in envs)


@pytest.mark.slow
def test_sft_then_online_grpo_learns_the_training_games(tmp_path, tiny_model):
    prep = load_module(TASK.folder / "prepare.py", "a2rl_task_textworld_prepare")
    counts = prep.N_TRAIN, prep.N_HELDOUT
    prep.N_TRAIN, prep.N_HELDOUT = 2, 2
    try:
        prep.prepare(tmp_path / "train", tmp_path / "heldout", source=FIXTURES)
    finally:
        prep.N_TRAIN, prep.N_HELDOUT = counts
    out = tmp_path / "out"
    env = dict(os.environ, MODEL_PATH=str(tiny_model), DATA_PATH=str(tmp_path / "train"), OUTPUT_DIR=str(out))
    env.pop("GRADING_SERVER_URL", None)
    proc = subprocess.run([sys.executable, "-m", "a2rl.agents.pipeline", "--train-format", "env_trajectories",
                           "--sft-steps", "120", "--grpo-steps", "4"],
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "policy rollouts on 2 training games" in proc.stdout and "environment steps" in proc.stdout

    base_train, sft_train = play_split(tiny_model, tmp_path / "train"), play_split(out / "sft", tmp_path / "train")
    assert base_train == (0, 0)
    assert sft_train[0] == 2  # SFT on the expert trajectories wins both training games
    assert play_split(tiny_model, tmp_path / "heldout") == (0, 0)  # the base model takes no coin
    assert (out / "grpo" / "model.safetensors").is_file()
