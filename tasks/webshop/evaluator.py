"""Score WebShop: ReAct episodes on the held-out goals (WebShop's human goals 0–99), at most 50 actions each.

Success is a purchase scoring reward 1 (WebShop's success rate; the reference counted reward >= 0.5); the mean
final reward (0 without a purchase) is reported alongside. Format and loop: a2rl/envs.py; shop: env.py.
"""

from __future__ import annotations

from pathlib import Path

from a2rl.tasklib.envs import generator_policy, load_module, play, summarize

ws = load_module(Path(__file__).with_name("env.py"), "a2rl_task_webshop_env")


def evaluate(generator, heldout_dir: Path, options: dict) -> dict:
    catalogue = ws.load_catalogue(heldout_dir)
    envs = [ws.WebShopEnv(catalogue, goal) for goal in ws.load_goals(heldout_dir)]
    generate, fits = generator_policy(generator, options)
    return summarize(play(generate, envs, [ws.HEADER] * len(envs), max_steps=int(options.get("max_steps", 50)),
                          fits=fits))
