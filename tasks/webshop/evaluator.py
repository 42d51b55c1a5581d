"""Score WebShop: ReAct episodes on 100 held-out goals, at most 50 actions each, under one of two protocols.

`paper` (the default) is the reference's evaluation: synthetic goals 0–99 (it builds WebAgentTextEnv without
human goals), its chat prompt (system message, the page's available actions, a 5-step history window), 100 new
tokens, and success = a purchase with reward >= 0.5. `a2rl` grades WebShop's human goals 0–99 with our raw ReAct
prompt (a2rl/tasklib/envs.py), 64 new tokens, and success = reward 1 (WebShop's own success rate). Both report
every success definition: reward-1 rate, reward >= 0.5 rate and mean final reward (0 without a purchase).
Both loops are env.py's transcripts (goal_transcript), which the reference agent trains through.
"""

from __future__ import annotations

from pathlib import Path

from a2rl.llm.chat import policy_prompt
from a2rl.tasklib.envs import generator_policy, load_module, play_transcripts

ws = load_module(Path(__file__).with_name("env.py"), "a2rl_task_webshop_env")
GOALS = {"paper": "synthetic_goals.jsonl", "a2rl": "goals.jsonl"}


def summarize(rewards: list[float], steps: list[int], protocol: str) -> dict:
    n = len(rewards)
    full, half = sum(r == 1.0 for r in rewards), sum(r >= 0.5 for r in rewards)
    successes = half if protocol == "paper" else full
    return {
        "score": 100.0 * successes / n,
        "n": n,
        "successes": successes,
        "success": ("reward >= 0.5" if protocol == "paper" else "reward = 1"),
        "reward_1_rate": 100.0 * full / n,
        "reward_half_rate": 100.0 * half / n,
        "mean_reward": sum(rewards) / n,
        "mean_steps": sum(steps) / n,
    }


def evaluate(generator, heldout_dir: Path, options: dict) -> dict:
    protocol = options.get("protocol", "paper")
    if protocol not in GOALS:
        raise ValueError(f"webshop: unknown protocol {protocol!r} (paper or a2rl)")
    options = {**options, **options.get(protocol, {})}
    catalogue = ws.load_catalogue(heldout_dir)
    window = int(options.get("history_window", ws.HISTORY_WINDOW))
    transcripts = [
        ws.goal_transcript(ws.WebShopEnv(catalogue, goal), protocol, window)
        for goal in ws.load_goals(heldout_dir, GOALS[protocol])
    ]
    # paper: an episode whose prompt does not fit the model's context ends there with reward 0, as the reference's
    # per-goal exception handler counts it; a2rl: react_prompt drops old turns to fit
    generate, fits = generator_policy(generator, options)
    played = play_transcripts(
        generate,
        transcripts,
        max_steps=int(options.get("max_steps", 50)),
        render=lambda messages: policy_prompt(generator, messages),
        fits=fits,
    )
    return summarize([t.reward for t in played], [len(t.actions) for t in played], protocol)
