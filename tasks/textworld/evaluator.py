"""Score the textworld task: ReAct episodes on the held-out games, success rate × 100 (format in a2rl/envs.py)."""

from __future__ import annotations

from pathlib import Path

from a2rl.tasklib.envs import generator_policy, load_module, play, summarize

tw = load_module(Path(__file__).with_name("env.py"), "a2rl_task_textworld_env")


def evaluate(generator, heldout_dir: Path, options: dict) -> dict:
    games = sorted((Path(heldout_dir) / "games").glob("*.z8"))
    envs = [tw.TextWorldEnv(g) for g in games]
    generate, fits = generator_policy(generator, options)
    try:
        episodes = play(generate, envs, [tw.HEADER] * len(envs), max_steps=int(options.get("max_steps", 50)),
                        fits=fits)
    finally:
        for env in envs:
            env.close()
    return summarize(episodes)
