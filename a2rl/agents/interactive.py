"""The pipeline's route for interactive tasks ($DATA_PATH/trajectories.jsonl): SFT warm-up on the successful
expert trajectories, then GRPO whose rewards come from online steps in the training episodes, submitting after each.

Task-agnostic: it plays whatever $DATA_PATH/env.py the task ships, through the common protocol of
a2rl.tasklib.envs (prompt_header, train_episodes, make_env); textworld, alfworld and webshop all expose it. It sees
only the train split: the trajectories and the episodes env.py lists under $DATA_PATH.

The trajectories' prompts are untruncated; the grader keeps each prompt inside the policy's context (a2rl/envs.py
drops old turns, then cuts from the left), so both stages rebuild every prompt with the grader's own `react_prompt`
and a `fits` for the base model's context. GRPO states are the expert prefixes plus the states the SFT policy
reaches when it plays the training episodes greedily (real environment episodes); a sampled action is scored by
executing it from that state in a fresh environment (a2rl.tasklib.envs.step_score).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from collections.abc import Callable
from pathlib import Path

from transformers import AutoConfig, AutoTokenizer

from a2rl.agents.pipeline import grpo_stage, log, sft_stage, submit
from a2rl.tasklib.envs import Episode, Fits, close, load_task_env, parse_action, play, react_prompt, score_actions

ACTION_TOKENS = 32  # the grader's max_new_tokens per action: prompts must leave room for them
ROLLOUT_EPISODES = 64  # training episodes the SFT policy plays for GRPO states (webshop has thousands of goals)


def context_fits(model_dir: Path, action_tokens: int = ACTION_TOKENS) -> Fits:
    """Whether a prompt fits the model's context as the grader decides it (a2rl.tasklib.envs.generator_policy)."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    context = int(getattr(AutoConfig.from_pretrained(model_dir), "max_position_embeddings", 0) or 1 << 30)
    return lambda prompt: len(tokenizer(prompt, add_special_tokens=True)["input_ids"]) <= context - action_tokens


def load_trajectories(data_path: Path) -> list[dict]:
    with open(data_path / "trajectories.jsonl") as f:
        return [json.loads(line) for line in f if line.strip()]


def sft_pairs(header: Callable[[str], str], trajectories: list[dict], fits: Fits) -> list[dict[str, str]]:
    """The successful trajectories' steps, with prompts as the grader would show them to this model (header: an
    episode's prompt header)."""
    return [{"prompt": react_prompt(header(t["episode"]), Episode(t["observations"][: k + 1], t["actions"][:k]), fits),
             "completion": f" {a}\n"}
            for t in trajectories if t["won"] for k, a in enumerate(t["actions"])]


class StepReward:
    """Reward a completion by executing its action in the episode, from the state its prompt came from.

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
                return self.pool.submit(score_actions, str(self.data_path / "env.py"), str(self.data_path),
                                        items).result()
            except BrokenProcessPool:
                log(f"environment worker crashed (attempt {attempt + 1}); restarting it")
                self.pool = None
        return [0.0] * len(items)

    def __call__(self, completions: list[str], episode: list[str], history: list[list[str]],
                 **kwargs) -> list[float]:
        keys = [(e, tuple(h), parse_action(c)) for c, e, h in zip(completions, episode, history)]
        todo = sorted(set(k for k in keys if k not in self.cache))
        if todo:
            self.cache.update(zip(todo, self._run(todo)))
            self.env_steps += sum(len(h) + 1 for _, h, _ in todo)
        return [self.cache[k] for k in keys]

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown()


def policy_states(model_dir: Path, env_module, episodes: list[str], data_path: Path, fits: Fits,
                  max_steps: int) -> list[tuple[str, tuple[str, ...]]]:
    """(episode, actions so far) for every state the model reaches playing the training episodes greedily."""
    from a2rl.grading.inference import Generator

    generator = Generator.load(model_dir)
    generate = lambda prompts: generator.generate(prompts, max_new_tokens=ACTION_TOKENS, stop="\n")  # noqa: E731
    envs = [env_module.make_env(data_path, e) for e in episodes]
    try:
        played = play(generate, envs, [env_module.prompt_header(data_path, e) for e in episodes], max_steps=max_steps,
                      fits=fits)
    finally:
        for env in envs:
            close(env)
    log(f"policy rollouts on {len(episodes)} training episodes: {sum(p.won for p in played)} won, "
        f"mean {sum(len(p.actions) for p in played) / len(played):.1f} steps")
    return [(e, tuple(p.actions[:k])) for e, p in zip(episodes, played) for k in range(len(p.actions) + (not p.done))]


def observations(env_module, data_path: Path, episode: str, history: tuple[str, ...]) -> list[str]:
    """The observations along a state's history, from real environment steps."""
    env = env_module.make_env(data_path, episode)
    try:
        return [env.reset()] + [env.step(a)[0] for a in history]
    finally:
        close(env)


def run(args: argparse.Namespace, model_path: Path, data_path: Path, out: Path) -> int:
    env_module = load_task_env(data_path / "env.py")
    trajectories = load_trajectories(data_path)
    fits = context_fits(model_path)
    pairs = sft_pairs(lambda episode: env_module.prompt_header(data_path, episode), trajectories, fits)
    log(f"interactive task: {len(trajectories)} trajectories ({sum(t['won'] for t in trajectories)} won), "
        f"{len(pairs)} SFT pairs, base model {model_path}")
    start = model_path
    if args.sft_steps > 0:
        log(f"stage sft: {args.sft_steps} steps")
        start = sft_stage(args, model_path, pairs, out, max_length=1024)  # prompts already fit the context: no truncation
        submit(start)
    if args.grpo_steps > 0:
        log(f"stage grpo: {args.grpo_steps} steps from {start}")
        states = {(t["episode"], tuple(t["actions"][:k])) for t in trajectories for k in range(len(t["actions"]))}
        episodes = env_module.train_episodes(data_path)
        random.Random(args.seed).shuffle(episodes)
        horizon = max(len(t["actions"]) for t in trajectories) + 2
        states |= set(policy_states(start, env_module, sorted(episodes[:ROLLOUT_EPISODES]), data_path, fits, horizon))
        rows = [{"prompt": react_prompt(env_module.prompt_header(data_path, s[0]),
                                        Episode(observations(env_module, data_path, *s), list(s[1])), fits),
                 "episode": s[0], "history": list(s[1])} for s in sorted(states)]
        reward = StepReward(data_path)
        log(f"grpo on {len(rows)} states")
        model = grpo_stage(args, start, rows, reward, out, temperature=1.0)
        log(f"grpo rewards took {reward.env_steps} environment steps")
        reward.close()
        submit(model)
    log("done")
    return 0
