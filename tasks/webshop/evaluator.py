"""Score WebShop: ReAct episodes on 100 held-out goals, at most 50 actions each, under one of two protocols.

`paper` (the default) is the reference's evaluation: synthetic goals 0–99 (it builds WebAgentTextEnv without
human goals), its chat prompt (system message, the page's available actions, a 5-step history window), 100 new
tokens, and success = a purchase with reward >= 0.5. `a2rl` grades WebShop's human goals 0–99 with our raw ReAct
prompt (a2rl/tasklib/envs.py), 64 new tokens, and success = reward 1 (WebShop's own success rate). Both report
every success definition: reward-1 rate, reward >= 0.5 rate and mean final reward (0 without a purchase).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from a2rl.grading.judge import policy_prompt
from a2rl.tasklib.envs import generator_policy, load_module, play

ws = load_module(Path(__file__).with_name("env.py"), "a2rl_task_webshop_env")
GOALS = {"paper": "synthetic_goals.jsonl", "a2rl": "goals.jsonl"}


def play_paper(generator, envs: Sequence, options: dict) -> tuple[list[float], list[int]]:
    """The reference's webshop_run for every env at once: (final rewards, steps). An episode whose prompt does not
    fit the model's context ends there with reward 0, as the reference's per-goal exception handler counts it."""
    generate, fits = generator_policy(generator, options)
    window, max_steps = int(options.get("history_window", 5)), int(options.get("max_steps", 50))
    observations = [env.page_text() for env in envs]  # fresh envs: the search page
    histories: list[list[tuple[str, str]]] = [[] for _ in envs]
    rewards, live = [0.0] * len(envs), list(range(len(envs)))
    for _ in range(max_steps):
        prompts = {i: policy_prompt(generator, ws.paper_messages(envs[i], histories[i], observations[i],
                                                                         window)) for i in live}
        live = [i for i in live if fits(prompts[i])]
        if not live:
            break
        still = []
        for i, completion in zip(live, generate([prompts[i] for i in live])):
            action = ws.paper_action(completion)
            _, reward, done, _ = envs[i].step(action)
            observations[i] = envs[i].page_text()
            histories[i].append((action, observations[i]))
            if done:
                rewards[i] = reward
            else:
                still.append(i)
        live = still
    return rewards, [len(h) for h in histories]


def summarize(rewards: list[float], steps: list[int], protocol: str) -> dict:
    n = len(rewards)
    full, half = sum(r == 1.0 for r in rewards), sum(r >= 0.5 for r in rewards)
    successes = half if protocol == "paper" else full
    return {"score": 100.0 * successes / n, "n": n, "successes": successes, "success": (
        "reward >= 0.5" if protocol == "paper" else "reward = 1"), "reward_1_rate": 100.0 * full / n,
        "reward_half_rate": 100.0 * half / n, "mean_reward": sum(rewards) / n, "mean_steps": sum(steps) / n}


def evaluate(generator, heldout_dir: Path, options: dict) -> dict:
    protocol = options.get("protocol", "paper")
    if protocol not in GOALS:
        raise ValueError(f"webshop: unknown protocol {protocol!r} (paper or a2rl)")
    options = {**options, **options.get(protocol, {})}
    catalogue = ws.load_catalogue(heldout_dir)
    envs = [ws.WebShopEnv(catalogue, goal) for goal in ws.load_goals(heldout_dir, GOALS[protocol])]
    if protocol == "paper":
        return summarize(*play_paper(generator, envs, options), protocol)
    generate, fits = generator_policy(generator, options)
    episodes = play(generate, envs, [ws.HEADER] * len(envs), max_steps=int(options.get("max_steps", 50)), fits=fits)
    return summarize([e.reward for e in episodes], [len(e.actions) for e in episodes], protocol)
