"""Score ALFWorld: ReAct 2-shot episodes on the valid_unseen games AlfredTWEnv loads, success rate × 100.

Protocol `paper` (the default) is the reference's loop (ReAct's alfworld notebook): a raw prompt with the game
type's two examples verbatim ("> action" lines, 12 of whose 127 actions ALFWorld >= 0.4 rejects), 100 new tokens,
"think:" actions stepped in the game and answered "OK.". Protocol `a2rl`: the same examples with valid actions, in
the shared ReAct format (a2rl/tasklib/envs.py). Both report the success rate per task type.
"""

from __future__ import annotations

import importlib
from collections import Counter
from pathlib import Path

from a2rl.tasklib.envs import generator_policy, load_module, play

alf = load_module(Path(__file__).with_name("env.py"), "a2rl_task_alfworld_env")
PROTOCOLS = ("paper", "a2rl")


def play_paper(generator, games: list[Path], envs: list, options: dict) -> tuple[list[bool], list[int]]:
    """alfworld_run for every game at once: (won, steps). A prompt that outgrows the model's context ends its
    episode as a loss (the reference's vLLM call would fail there)."""
    generate, fits = generator_policy(generator, options)
    prompts = [alf.paper_prompt(game, env.reset()) for game, env in zip(games, envs)]
    won, steps, live = [False] * len(envs), [0] * len(envs), list(range(len(envs)))
    for _ in range(int(options.get("max_steps", 50))):
        live = [i for i in live if fits(prompts[i])]
        if not live:
            break
        still = []
        for i, completion in zip(live, generate([prompts[i] for i in live])):
            action = completion.split("\n", 1)[0].strip()
            observation, _, done, info = envs[i].step(action)  # thoughts too: they cost a game step
            observation = "OK." if action.startswith("think:") else alf.process_ob(observation)
            prompts[i] += f" {action}\n{observation}\n>"
            steps[i] += 1
            if done:
                won[i] = bool(info["won"])
            else:
                still.append(i)
        live = still
    return won, steps


def evaluate(generator, heldout_dir: Path, options: dict) -> dict:
    protocol = options.get("protocol", "paper")
    if protocol not in PROTOCOLS:
        raise ValueError(f"alfworld: unknown protocol {protocol!r} (paper or a2rl)")
    options = {**options, **options.get(protocol, {})}
    max_steps = int(options.get("max_steps", 50))
    factory = options.get("env_factory")
    if factory:
        module, _, name = factory.partition(":")
        make = getattr(importlib.import_module(module), name)
    else:
        make = alf.AlfworldEnv
    games = alf.graded_games(Path(heldout_dir) / "games")
    if not games:
        raise ValueError(f"alfworld: no playable game under {heldout_dir}/games: prepare the task again")
    envs = [make(game, max_steps) for game in games]
    if protocol == "paper":
        won, steps = play_paper(generator, games, envs, options)
    else:
        generate, fits = generator_policy(generator, options)
        episodes = play(generate, envs, [alf.a2rl_header(g) for g in games], max_steps=max_steps, fits=fits)
        won, steps = [e.won for e in episodes], [len(e.actions) for e in episodes]
    n = len(games)
    types, wins = Counter(alf.example_key(g) for g in games), Counter(alf.example_key(g) for g, w in zip(games, won) if w)
    return {"score": 100.0 * sum(won) / n, "n": n, "successes": sum(won), "mean_steps": sum(steps) / n,
            "per_type": {t: {"successes": wins[t], "n": c} for t, c in sorted(types.items())}}
