"""Score ALFWorld: ReAct 2-shot episodes on the valid_unseen games AlfredTWEnv loads, success rate × 100.

Protocol `paper` (the default) is the reference's loop (ReAct's alfworld notebook): a raw prompt with the game
type's two examples verbatim ("> action" lines, 12 of whose 127 actions ALFWorld >= 0.4 rejects), 100 new tokens,
"think:" actions stepped in the game and answered "OK.". Protocol `a2rl`: the same examples with valid actions, in
the shared ReAct format (a2rl/tasklib/envs.py). Both loops are env.py's transcripts (game_transcript), which the
reference agent trains through. Both report the success rate per task type.
"""

from __future__ import annotations

import importlib
from collections import Counter
from pathlib import Path

from a2rl.tasklib.envs import generator_policy, load_module, play_transcripts

alf = load_module(Path(__file__).with_name("env.py"), "a2rl_task_alfworld_env")
PROTOCOLS = ("paper", "a2rl")


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
    # paper: a prompt that outgrows the model's context ends its episode as a loss (the reference's vLLM call
    # would fail there); a2rl: react_prompt drops old turns to fit
    generate, fits = generator_policy(generator, options)
    played = play_transcripts(
        generate, [alf.game_transcript(g, make(g, max_steps), protocol) for g in games], max_steps=max_steps, fits=fits
    )
    won, steps = [t.won for t in played], [len(t.actions) for t in played]
    n = len(games)
    types, wins = (
        Counter(alf.example_key(g) for g in games),
        Counter(alf.example_key(g) for g, w in zip(games, won) if w),
    )
    return {
        "score": 100.0 * sum(won) / n,
        "n": n,
        "successes": sum(won),
        "mean_steps": sum(steps) / n,
        "per_type": {t: {"successes": wins[t], "n": c} for t, c in sorted(types.items())},
    }
