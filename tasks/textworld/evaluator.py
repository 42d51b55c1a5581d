"""Score the textworld task: ReAct episodes on the held-out games, success rate × 100 (format in a2rl/tasklib/envs.py).
One loop under either protocol: env.py's transcript, which the reference agent trains through."""

from __future__ import annotations

from pathlib import Path

from a2rl.tasklib.envs import generator_policy, load_module, play_transcripts, summarize

tw = load_module(Path(__file__).with_name("env.py"), "a2rl_task_textworld_env")


def evaluate(generator, heldout_dir: Path, options: dict) -> dict:
    games = sorted((Path(heldout_dir) / "games").glob("*.z8"))
    transcripts = [tw.transcript(heldout_dir, f"games/{g.name}", options.get("protocol", "paper")) for g in games]
    generate, fits = generator_policy(generator, options)
    try:
        played = play_transcripts(generate, transcripts, max_steps=int(options.get("max_steps", 50)), fits=fits)
    finally:
        for t in transcripts:
            t.env.close()
    return summarize([t.episode for t in played])
