"""The pipeline's route for interactive tasks ($DATA_PATH/trajectories.jsonl): SFT warm-up on the successful
expert trajectories, then GRPO whose rewards come from online steps in the training episodes, submitting after each.

Task-agnostic: it plays whatever $DATA_PATH/env.py the task ships, through the common protocol of
a2rl.tasklib.envs (prompt_header, train_episodes, make_env, transcript); textworld, alfworld, webshop and
deepsearchqa all expose it. It sees only the train split: the trajectories and the episodes env.py lists under
$DATA_PATH.

Every prompt is the one the task's grader sends under the run's protocol: env.py's `transcript` is the grader's own
loop for an episode (the task's evaluator plays its held-out episodes through the same classes), so both stages
replay each state's actions through it, render its chat prompts with the base model's chat template and keep
prompts inside the model's context as the grader does (a step whose prompt the grader would not send is not
trained). An SFT completion is the transcript's `reply` for the expert's action (e.g. " <action>\n", or a thought-
less "Action: ..." where the loop expects a Thought first: the experts have no thoughts), and the loop reads the
expert's action back from it. GRPO states are the expert prefixes plus the states the SFT policy reaches when it
plays the training episodes greedily through the same loop (real environment episodes); a sampled completion is
read and scored as that loop reads it, by executing it from that state in a fresh environment
(a2rl.tasklib.envs.score_actions).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from types import ModuleType

from transformers import AutoConfig, AutoTokenizer, PreTrainedTokenizerBase

from a2rl.llm.chat import chat_prompt
from a2rl.reference.process import log
from a2rl.reference.stages import grpo_stage, sft_stage
from a2rl.reference.submitter import submit
from a2rl.tasklib.envs import Fits, Messages, Transcript, close, load_task_env, play_transcripts, score_actions

ROLLOUT_EPISODES = 64  # training episodes the SFT policy plays for GRPO states (webshop has thousands of goals)

State = tuple[str, tuple[str, ...]]  # (episode, the actions so far, as the protocol's loop read them)


class GraderLoop:
    """The run's protocol's loop over the training episodes (env.py's transcripts), with prompts rendered and kept
    inside the context as the grader does for this model (a2rl.tasklib.envs.generator_policy)."""

    def __init__(
        self,
        env_module: ModuleType,
        data_path: Path,
        protocol: str,
        tokenizer: PreTrainedTokenizerBase,
        context: int,
        template_kwargs: dict | None = None,
    ):
        self.env_module, self.data_path, self.protocol = env_module, data_path, protocol
        self.tokenizer, self.context = tokenizer, context
        self.template_kwargs = template_kwargs or {}  # the run's chat_template_kwargs, as the grader renders with

    @classmethod
    def for_model(
        cls,
        env_module: ModuleType,
        data_path: Path,
        protocol: str,
        model_dir: Path,
        template_kwargs: dict | None = None,
    ) -> "GraderLoop":
        context = int(getattr(AutoConfig.from_pretrained(model_dir), "max_position_embeddings", 0) or 1 << 30)
        return cls(env_module, data_path, protocol, AutoTokenizer.from_pretrained(model_dir), context, template_kwargs)

    def transcript(self, episode: str) -> Transcript:
        return self.env_module.transcript(self.data_path, episode, self.protocol)

    def render(self, messages: Messages) -> str:
        return chat_prompt(self.tokenizer, messages, self.template_kwargs)

    def fits(self, transcript: Transcript) -> Fits:
        limit = self.context - transcript.max_new_tokens
        return lambda prompt: len(self.tokenizer(prompt, add_special_tokens=True)["input_ids"]) <= limit

    def prompts(
        self, episode: str, history: list[str], *, expert: bool = False
    ) -> tuple[list[str], list[str], list[str]]:
        """The prompts the loop sends before each action of `history` and after the last, fewer where it would end
        the episode first (done, or a prompt outgrowing the context); the actions as the loop took them; and the
        replies they were read from. expert: `history` holds an expert's actions, each given as the transcript's
        reply and read back from it (else they are taken as they are, with no replies)."""
        t = self.transcript(episode)
        fits, sent, taken, replies = self.fits(t), [], [], []
        try:
            for k in range(len(history) + 1):
                prompt = None if t.done else t.prompt(self.render, fits)
                if prompt is None or not fits(prompt):
                    break
                sent.append(prompt)
                if k < len(history):
                    if expert:
                        replies.append(t.reply(history[k]))
                    taken.append(t.read(replies[-1]) if expert else history[k])
                    t.step(taken[-1])
        finally:
            close(t.env)
        return sent, taken, replies

    def expert_steps(self, trajectories: list[dict]) -> tuple[list[dict[str, str]], set[State]]:
        """SFT pairs for every step of the won trajectories the loop would prompt for (its prompt, the transcript's
        reply for the expert's action), and the states along every trajectory that the loop prompts in."""
        pairs, states = [], set()
        for traj in trajectories:
            sent, taken, replies = self.prompts(traj["episode"], traj["actions"], expert=True)
            if traj["won"]:
                pairs += [{"prompt": p, "completion": r} for p, r in zip(sent, replies)]
            states |= {(traj["episode"], tuple(taken[:k])) for k in range(min(len(sent), len(taken)))}
        return pairs, states

    def grpo_rows(self, states: set[State]) -> list[dict]:
        """A row per state the loop would prompt in: its prompt, and the state for the reward."""
        rows = []
        for episode, history in sorted(states):
            sent, _, _ = self.prompts(episode, list(history))
            if len(sent) == len(history) + 1:
                rows.append({"prompt": sent[-1], "episode": episode, "history": list(history)})
        return rows


def load_trajectories(data_path: Path) -> list[dict]:
    with open(data_path / "trajectories.jsonl") as f:
        return [json.loads(line) for line in f if line.strip()]


class StepReward:
    """Reward a completion by executing its action in the episode, from the state its prompt came from.

    The environment steps run in a worker process: TextWorld games stepped thousands of times inside the
    training process crashed it (segfault) after a few GRPO steps; a crashed worker is replaced and retried."""

    def __init__(self, data_path: Path, protocol: str):
        self.data_path, self.protocol = data_path, protocol
        self.__name__ = "env_step_reward"  # TRL logs reward functions by name
        self.cache: dict[tuple[str, tuple[str, ...], str], float] = {}
        self.pool: ProcessPoolExecutor | None = None
        self.env_steps = 0

    def _run(self, items: list) -> list[float]:
        for attempt in range(3):
            if self.pool is None:
                self.pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
            try:
                return self.pool.submit(
                    score_actions, str(self.data_path / "env.py"), str(self.data_path), self.protocol, items
                ).result()
            except BrokenProcessPool:
                log(f"environment worker crashed (attempt {attempt + 1}); restarting it")
                self.pool = None
        return [0.0] * len(items)

    def __call__(self, completions: list[str], episode: list[str], history: list[list[str]], **kwargs) -> list[float]:
        keys = [(e, tuple(h), c) for c, e, h in zip(completions, episode, history)]  # read as the loop reads it
        todo = sorted(set(k for k in keys if k not in self.cache))
        if todo:
            self.cache.update(zip(todo, self._run(todo)))
            self.env_steps += sum(len(h) + 1 for _, h, _ in todo)
        return [self.cache[k] for k in keys]

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown()


def policy_states(model_dir: Path, loop: GraderLoop, episodes: list[str], max_steps: int) -> list[State]:
    """Every state the model reaches playing the training episodes greedily through the protocol's loop."""
    from a2rl.llm.inference import Generator

    generator = Generator.load(model_dir)
    transcripts = [loop.transcript(e) for e in episodes]
    first = transcripts[0]
    try:
        played = play_transcripts(
            lambda prompts: generator.generate(prompts, max_new_tokens=first.max_new_tokens, stop=first.stop),
            transcripts,
            max_steps=max_steps,
            render=loop.render,
            fits=loop.fits(first),
        )
    finally:
        for t in transcripts:
            close(t.env)
    log(
        f"policy rollouts on {len(episodes)} training episodes: {sum(t.won for t in played)} won, "
        f"mean {sum(len(t.actions) for t in played) / len(played):.1f} steps"
    )
    return [(e, tuple(t.actions[:k])) for e, t in zip(episodes, played) for k in range(len(t.actions) + (not t.done))]


def run(args: argparse.Namespace, model_path: Path, data_path: Path, out: Path) -> int:
    env_module = load_task_env(data_path / "env.py")
    trajectories = load_trajectories(data_path)
    loop = GraderLoop.for_model(env_module, data_path, args.protocol, model_path, args.template_kwargs)
    pairs, expert_states = loop.expert_steps(trajectories)
    log(
        f"interactive task: {len(trajectories)} trajectories ({sum(t['won'] for t in trajectories)} won), "
        f"{len(pairs)} SFT pairs in protocol {args.protocol}'s prompts, base model {model_path}"
    )
    start = model_path
    if args.sft_steps > 0 and not pairs:
        log(
            f"error: no expert step fits the model's context in protocol {args.protocol}'s prompts "
            f"({loop.context} tokens): the grader would end every episode before its first action"
        )
        return 2
    if args.sft_steps > 0:
        log(f"stage sft: {args.sft_steps} steps")
        start = sft_stage(args, model_path, pairs, out, max_length=loop.context)  # prompts fit: no truncation
        submit(start)
    if args.grpo_steps > 0:
        log(f"stage grpo: {args.grpo_steps} steps from {start}")
        states = set(expert_states)
        episodes = env_module.train_episodes(data_path)
        random.Random(args.seed).shuffle(episodes)
        horizon = max(len(t["actions"]) for t in trajectories) + 2
        states |= set(policy_states(start, loop, sorted(episodes[:ROLLOUT_EPISODES]), horizon))
        rows = loop.grpo_rows(states)
        reward = StepReward(data_path, args.protocol)
        log(f"grpo on {len(rows)} states")
        model = grpo_stage(args, start, rows, reward, out, temperature=1.0)
        log(f"grpo rewards took {reward.env_steps} environment steps")
        reward.close()
        submit(model)
    log("done")
    return 0
