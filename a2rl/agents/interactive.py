"""The pipeline's route for interactive tasks ($DATA_PATH/trajectories.jsonl): SFT warm-up on the successful
expert trajectories, then GRPO whose rewards come from online steps in the training games, submitting after each.

The trajectories' prompts are untruncated; the grader keeps each prompt inside the policy's context (a2rl/envs.py
drops old turns, then cuts from the left), so both stages rebuild every prompt with the grader's own `react_prompt`
and a `fits` for the base model's context. GRPO states are the expert prefixes plus the states the SFT policy
reaches when it plays the training games greedily (real environment episodes); a sampled action is scored by
executing it from that state in a fresh environment: 1 if the game's score rose (or the game was won), 0.1 if the
command was admissible, else 0.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from transformers import AutoConfig, AutoTokenizer

from a2rl.agents.pipeline import grpo_stage, log, sft_stage, submit
from a2rl.tasklib.envs import Episode, Fits, load_module, parse_action, play, react_prompt

ACTION_TOKENS = 32  # the grader's max_new_tokens per action: prompts must leave room for them


def context_fits(model_dir: Path, action_tokens: int = ACTION_TOKENS) -> Fits:
    """Whether a prompt fits the model's context as the grader decides it (a2rl.tasklib.envs.generator_policy)."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    context = int(getattr(AutoConfig.from_pretrained(model_dir), "max_position_embeddings", 0) or 1 << 30)
    return lambda prompt: len(tokenizer(prompt, add_special_tokens=True)["input_ids"]) <= context - action_tokens


def load_trajectories(data_path: Path) -> list[dict]:
    with open(data_path / "trajectories.jsonl") as f:
        return [json.loads(line) for line in f if line.strip()]


def sft_pairs(header: str, trajectories: list[dict], fits: Fits) -> list[dict[str, str]]:
    """The successful trajectories' steps, with prompts as the grader would show them to this model."""
    return [{"prompt": react_prompt(header, Episode(t["observations"][: k + 1], t["actions"][:k]), fits),
             "completion": f" {a}\n"}
            for t in trajectories if t["won"] for k, a in enumerate(t["actions"])]


_WORKER_ENVS: dict[str, object] = {}  # in the worker process: one environment per game, reset for every state


def _score_states(env_py: str, data_path: str, items: list[tuple[str, tuple[str, ...], str]]) -> list[float]:
    """Run in a worker process: execute each (game, history, action) in the game and score the action."""
    env_module = load_module(env_py, "a2rl_workspace_env")
    scores = []
    for game, history, action in items:
        if game not in _WORKER_ENVS:
            _WORKER_ENVS[game] = env_module.TextWorldEnv(Path(data_path) / game)
        env = _WORKER_ENVS[game]
        env.reset()
        for a in history:
            env.step(a)
        _, reward, _, info = env.step(action)
        if reward > 0 or info.get("won"):
            scores.append(1.0)
        else:
            scores.append(0.1 if action in info.get("admissible_commands", ()) else 0.0)
    return scores


class StepReward:
    """Reward a completion by executing its action in the game, from the state its prompt came from.

    The environment steps run in a worker process: TextWorld games stepped thousands of times inside the
    training process crashed it (segfault) after a few GRPO steps; a crashed worker is replaced and retried."""

    def __init__(self, data_path: Path):
        self.data_path = data_path
        self.__name__ = "env_step_reward"  # TRL logs reward functions by name
        self.cache: dict[tuple[str, tuple[str, ...], str], float] = {}
        self.pool: ProcessPoolExecutor | None = None
        self.env_steps = 0

    def _run(self, items: list) -> list[float]:
        for attempt in range(3):
            if self.pool is None:
                self.pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
            try:
                return self.pool.submit(_score_states, str(self.data_path / "env.py"), str(self.data_path),
                                        items).result()
            except BrokenProcessPool:
                log(f"environment worker crashed (attempt {attempt + 1}); restarting it")
                self.pool = None
        return [0.0] * len(items)

    def __call__(self, completions: list[str], game: list[str], history: list[list[str]], **kwargs) -> list[float]:
        keys = [(g, tuple(h), parse_action(c)) for c, g, h in zip(completions, game, history)]
        todo = sorted(set(k for k in keys if k not in self.cache))
        if todo:
            self.cache.update(zip(todo, self._run(todo)))
            self.env_steps += sum(len(h) + 1 for _, h, _ in todo)
        return [self.cache[k] for k in keys]

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown()


def policy_states(model_dir: Path, env_module, games: list[Path], data_path: Path, fits: Fits,
                  max_steps: int) -> list[tuple[str, list[str]]]:
    """(game, actions so far) for every state the model reaches playing the training games greedily."""
    from a2rl.grading.inference import Generator

    generator = Generator.load(model_dir)
    generate = lambda prompts: generator.generate(prompts, max_new_tokens=ACTION_TOKENS, stop="\n")  # noqa: E731
    envs = [env_module.TextWorldEnv(g) for g in games]
    try:
        episodes = play(generate, envs, [env_module.HEADER] * len(envs), max_steps=max_steps, fits=fits)
    finally:
        for e in envs:
            e.close()
    log(f"policy rollouts on {len(games)} training games: {sum(e.won for e in episodes)} won, "
        f"mean {sum(len(e.actions) for e in episodes) / len(episodes):.1f} steps")
    return [(str(g.relative_to(data_path)), ep.actions[:k]) for g, ep in zip(games, episodes)
            for k in range(len(ep.actions) + (not ep.done))]


def run(args: argparse.Namespace, model_path: Path, data_path: Path, out: Path) -> int:
    env_module = load_module(data_path / "env.py", "a2rl_workspace_env")
    trajectories = load_trajectories(data_path)
    fits = context_fits(model_path)
    pairs = sft_pairs(env_module.HEADER, trajectories, fits)
    log(f"interactive task: {len(trajectories)} trajectories ({sum(t['won'] for t in trajectories)} won), "
        f"{len(pairs)} SFT pairs, base model {model_path}")
    start = model_path
    if args.sft_steps > 0:
        log(f"stage sft: {args.sft_steps} steps")
        start = sft_stage(args, model_path, pairs, out, max_length=1024)  # prompts already fit the context: no truncation
        submit(start)
    if args.grpo_steps > 0:
        log(f"stage grpo: {args.grpo_steps} steps from {start}")
        states = {(t["game"], tuple(t["actions"][:k])) for t in trajectories for k in range(len(t["actions"]))}
        games = sorted(data_path / t["game"] for t in trajectories)
        horizon = max(len(t["actions"]) for t in trajectories) + 2
        states |= {(g, tuple(h)) for g, h in policy_states(start, env_module, games, data_path, fits, horizon)}
        obs = {}  # the observations along each state's history, from real environment steps
        for game, history in sorted(states):
            env = env_module.TextWorldEnv(data_path / game)
            try:
                observations = [env.reset()] + [env.step(a)[0] for a in history]
            finally:
                env.close()
            obs[game, history] = observations
        rows = [{"prompt": react_prompt(env_module.HEADER, Episode(obs[s], list(s[1])), fits), "game": s[0],
                 "history": list(s[1])} for s in sorted(states)]
        reward = StepReward(data_path)
        log(f"grpo on {len(rows)} states")
        model = grpo_stage(args, start, rows, reward, out, temperature=1.0)
        log(f"grpo rewards took {reward.env_steps} environment steps")
        reward.close()
        submit(model)
    log("done")
    return 0
