"""Score ALFWorld: ReAct 2-shot episodes on the valid_unseen games, success rate × 100."""

from __future__ import annotations

import importlib
from pathlib import Path

from a2rl.tasklib.envs import generator_policy, load_module, play, summarize

alf = load_module(Path(__file__).with_name("env.py"), "a2rl_task_alfworld_env")


def evaluate(generator, heldout_dir: Path, options: dict) -> dict:
    max_steps = int(options.get("max_steps", 50))
    factory = options.get("env_factory")
    if factory:
        module, _, name = factory.partition(":")
        make = getattr(importlib.import_module(module), name)
    else:
        make = alf.AlfworldEnv
    envs = [make(game, max_steps) for game in alf.games(Path(heldout_dir) / "games")]
    generate, fits = generator_policy(generator, options)
    return summarize(play(generate, envs, [alf.PROMPT_HEADER] * len(envs), max_steps=max_steps, fits=fits))
