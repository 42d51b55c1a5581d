"""Text environments and the ReAct loop shared by the level-3 interactive tasks (textworld, alfworld, webshop).

Standard library only: prepare scripts copy this file into the agent's workspace as `react.py`, next to the
task's environment wrapper, so the agent builds prompts and plays training games exactly as the grader does.

Every interactive task's env.py (the agent's $DATA_PATH/env.py) exposes the same protocol, so one agent plays any
of them: prompt_header(data_dir, episode) (protocol a2rl's prompt header for an episode: ALFWorld's examples follow
the game's type), train_episodes(data_dir) (ids of the training episodes: a
game's path under data_dir, or a goal's index), make_env(data_dir, episode) (a fresh TextEnv for one) and
transcript(data_dir, episode, protocol, env=None) (a `Transcript`: the episode as that grading protocol's loop
prompts for it, turn by turn; the task's evaluator plays its held-out episodes through the same classes). Its
prepare step writes trajectories.jsonl next to it: one `trajectory_record` per expert episode on the train split.

Protocol a2rl's prompt format (plain text, no chat template; `ReactTranscript`):

    <header: instructions and any few-shot examples>
    Observation: <first observation>
    Action: <action>
    Observation: <what the action did>
    ...
    Observation: <latest observation>
    Action:

The policy completes the last line; the grader decodes greedily and stops at the first newline, so the ideal
completion is " <action>\n". An action starting with "think:" is a ReAct thought: it costs a step, reaches no
environment and is answered "OK.".
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Protocol, Sequence


class TextEnv(Protocol):
    def reset(self) -> str: ...

    def step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        """(observation, reward, done, info); info["won"] says whether the episode succeeded, info["valid"] whether
        the action was one the state admitted (a shaping signal for training; graders ignore it)."""
        ...


TASK_ENV_NAMES = ("prompt_header", "train_episodes", "make_env", "transcript")


def load_task_env(env_py: str | Path, name: str = "a2rl_workspace_env") -> ModuleType:
    """A task's env.py, checked to expose the common protocol (TASK_ENV_NAMES)."""
    module = load_module(env_py, name)
    missing = [n for n in TASK_ENV_NAMES if not hasattr(module, n)]
    if missing:
        raise ValueError(
            f"{env_py} lacks {', '.join(missing)} of the interactive task protocol ({', '.join(TASK_ENV_NAMES)})"
        )
    return module


def close(env: TextEnv) -> None:
    """Release an environment's engine (TextWorld runs a subprocess); pure-Python ones have no close()."""
    getattr(env, "close", lambda: None)()


@dataclass
class Episode:
    observations: list[str]  # observations[0] comes from reset(); observations[k + 1] follows actions[k]
    actions: list[str] = field(default_factory=list)
    reward: float = 0.0  # the last reward the environment gave
    won: bool = False
    done: bool = False


Generate = Callable[[list[str]], list[str]]  # prompts → completions
Fits = Callable[[str], bool]  # whether a prompt fits the policy's context
Messages = list[dict[str, str]]
Render = Callable[[Messages], str]  # a chat → the policy's prompt text (the grader: the graded model's chat template)


def parse_action(completion: str) -> str:
    """The action in a completion: its first line, without a repeated "Action:" or ">" prefix."""
    line = completion.strip().split("\n", 1)[0].strip()
    for prefix in ("Action:", ">"):
        if line.startswith(prefix):
            line = line[len(prefix) :].strip()
    return line


def react_prompt(header: str, episode: Episode, fits: Fits | None = None) -> str:
    """The prompt for the episode's next action. When it does not fit, the oldest turns after the first go
    (the first observation states the task), then the first, then the text is cut from the left: a model with a
    short context sees what it would have seen last anyway."""
    turns = [f"Observation: {o}\nAction: {a}\n" for o, a in zip(episode.observations, episode.actions)]
    tail = f"Observation: {episode.observations[-1]}\nAction:"
    head = header.rstrip("\n") + "\n\n" if header else ""
    prompt = head + "".join(turns) + tail
    while fits is not None and not fits(prompt) and turns:
        turns.pop(1 if len(turns) > 1 else 0)
        prompt = head + "".join(turns) + tail
    while fits is not None and not fits(prompt) and len(prompt) > 1:
        prompt = prompt[len(prompt) // 8 or 1 :]
    return prompt


class Transcript:
    """One episode as a grading protocol's loop prompts for it, turn by turn. A task's evaluator plays its held-out
    episodes through these, and the reference agent builds its training prompts (an expert's steps, the states its
    policy reaches) through the same ones, so the prompts it trains on are the grader's.

    Subclasses set `stop` (where the grader stops each generation) and `max_new_tokens` (its limit per step), keep
    `actions`, `done`, `won` and `reward`, and define prompt (the next step's prompt), read (the action the loop
    reads from a completion), reply (a completion the loop reads as a given action, ending where generation stops)
    and step (take an action as the loop does; returns the environment's (observation, reward, done, info))."""

    stop: str | tuple[str, ...] = "\n"
    max_new_tokens = 32
    actions: list[str]
    done: bool
    won: bool
    reward: float

    def prompt(self, render: Render, fits: Fits | None = None) -> str:
        raise NotImplementedError

    @staticmethod
    def read(completion: str) -> str:
        raise NotImplementedError

    def reply(self, action: str) -> str:
        raise NotImplementedError

    def step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        raise NotImplementedError


class ReactTranscript(Transcript):
    """Protocol a2rl's loop (module docstring): the shared ReAct prompt, kept inside the context by react_prompt; a
    "think:" action costs a step and is answered "OK." without reaching the environment."""

    def __init__(self, env: TextEnv, header: str, max_new_tokens: int = 32):
        self.env, self.header, self.max_new_tokens = env, header, max_new_tokens
        self.episode = Episode([env.reset()])

    actions = property(lambda self: self.episode.actions)
    done = property(lambda self: self.episode.done)
    won = property(lambda self: self.episode.won)
    reward = property(lambda self: self.episode.reward)

    def prompt(self, render: Render | None = None, fits: Fits | None = None) -> str:
        return react_prompt(self.header, self.episode, fits)

    read = staticmethod(parse_action)

    def reply(self, action: str) -> str:
        return f" {action}\n"

    def step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        ep = self.episode
        if action.lower().startswith("think:"):
            obs, reward, done, info = "OK.", 0.0, False, {}
        else:
            obs, reward, done, info = self.env.step(action)
            ep.reward, ep.done, ep.won = reward, done, bool(info.get("won", False))
        ep.actions.append(action)
        ep.observations.append(obs)
        return obs, reward, done, info


def play_transcripts(
    generate: Generate,
    transcripts: Sequence[Transcript],
    *,
    max_steps: int,
    render: Render | None = None,
    fits: Fits | None = None,
) -> Sequence[Transcript]:
    """Step every transcript's episode together, one generate call per turn, until each is done, its prompt no
    longer fits (the loop ends it there, as the reference's would fail) or max_steps have passed."""
    live = list(range(len(transcripts)))
    for _ in range(max_steps):
        prompts = {i: transcripts[i].prompt(render, fits) for i in live if not transcripts[i].done}
        live = [i for i, p in prompts.items() if fits is None or fits(p)]
        if not live:
            break
        for i, completion in zip(live, generate([prompts[i] for i in live])):
            transcripts[i].step(transcripts[i].read(completion))
    return transcripts


def play(
    generate: Generate, envs: Sequence[TextEnv], headers: Sequence[str], *, max_steps: int, fits: Fits | None = None
) -> list[Episode]:
    """Protocol a2rl's loop: one episode per environment, all unfinished episodes stepped together."""
    played = play_transcripts(
        generate, [ReactTranscript(e, h) for e, h in zip(envs, headers)], max_steps=max_steps, fits=fits
    )
    return [t.episode for t in played]  # type: ignore[attr-defined]


def rollout(
    policy_fn: Callable[[str], str], env: TextEnv, header: str, *, max_steps: int = 50, fits: Fits | None = None
) -> Episode:
    """One episode with a prompt → completion policy (the agent's side of `play`)."""
    return play(lambda prompts: [policy_fn(p) for p in prompts], [env], [header], max_steps=max_steps, fits=fits)[0]


def replay(env: TextEnv, actions: Sequence[str], *, strict: bool = False) -> Episode:
    """Step an environment through fixed actions from reset() until they run out or the episode ends. strict: an
    action the state does not admit (info["valid"] false) raises ValueError, for actions recorded elsewhere."""
    episode = Episode([env.reset()])
    for action in actions:
        if episode.done:
            break
        obs, episode.reward, episode.done, info = env.step(action)
        if strict and not info.get("valid", True):
            raise ValueError(f"step {len(episode.actions) + 1}: {action!r} is not admitted here")
        episode.won = bool(info.get("won", False))
        episode.actions.append(action)
        episode.observations.append(obs)
    return episode


def trajectory_record(episode_id: str, episode: Episode, header: str, source: str) -> dict[str, Any]:
    """One line of a task's trajectories.jsonl: the episode, where its actions came from, and its SFT pairs."""
    return {
        "episode": episode_id,
        "source": source,
        "won": episode.won,
        "reward": episode.reward,
        "actions": episode.actions,
        "observations": episode.observations,
        "steps": sft_pairs(header, episode),
    }


def step_score(reward: float, info: dict[str, Any]) -> float:
    """An action's reward for RL: 1 if it won the episode, the environment's reward in (0, 1] if it earned one (a
    TextWorld point, a WebShop purchase's partial score), 0.1 if the state admitted it, else 0."""
    if info.get("won"):
        return 1.0
    if reward > 0:
        return min(1.0, reward)
    return 0.1 if info.get("valid") else 0.0


_SCORING_ENVS: dict[tuple[str, str], TextEnv] = {}  # per process: one environment per episode, reset for each state


def score_actions(
    env_py: str, data_dir: str, protocol: str, items: Sequence[tuple[str, Sequence[str], str]]
) -> list[float]:
    """Score each (episode, history, completion): replay the history from the episode's reset as the protocol's
    loop takes it, then the action that loop reads from the completion (step_score). A module-level function so
    that a worker process can run it (the agent's StepReward does)."""
    module = load_task_env(env_py)
    scores = []
    for episode, history, completion in items:
        env = _SCORING_ENVS.get((env_py, episode))
        if env is None:
            env = _SCORING_ENVS[env_py, episode] = module.make_env(data_dir, episode)
        transcript = module.transcript(data_dir, episode, protocol, env)  # resets env
        for a in history:
            transcript.step(a)
        _, reward, _, info = transcript.step(transcript.read(completion))
        scores.append(step_score(reward, info))
    return scores


def sft_pairs(header: str, episode: Episode) -> list[dict[str, str]]:
    """{"prompt", "completion"} for every action of an episode, in the grader's prompt format."""
    return [
        {
            "prompt": react_prompt(header, Episode(episode.observations[: k + 1], episode.actions[:k])),
            "completion": f" {a}\n",
        }
        for k, a in enumerate(episode.actions)
    ]


def generator_policy(generator: Any, options: dict[str, Any]) -> tuple[Generate, Fits]:
    """Adapt a2rl.llm.inference.Generator: greedy, one line per action, prompts kept inside the model's context."""
    max_new_tokens = int(options.get("max_new_tokens", 32))
    batch_size = int(options.get("batch_size", 64))
    context = int(getattr(generator.config, "max_position_embeddings", 0) or 1 << 30)
    limit = min(context - max_new_tokens, int(options.get("max_prompt_tokens", context)))

    def generate(prompts: list[str]) -> list[str]:
        return generator.generate(prompts, max_new_tokens=max_new_tokens, batch_size=batch_size, stop="\n")

    def fits(prompt: str) -> bool:
        return len(generator.tokenizer(prompt, add_special_tokens=True)["input_ids"]) <= limit

    return generate, fits


def summarize(episodes: Sequence[Episode]) -> dict[str, float]:
    """Score = success rate × 100; mean final reward and steps reported alongside."""
    n = len(episodes)
    return {
        "score": 100.0 * sum(e.won for e in episodes) / n,
        "n": n,
        "successes": sum(e.won for e in episodes),
        "mean_reward": sum(e.reward for e in episodes) / n,
        "mean_steps": sum(len(e.actions) for e in episodes) / n,
    }


def load_module(path: str | Path, name: str, *, fresh: bool = False) -> ModuleType:
    """Import a task's file by path under `name` (a2rl's one loader of task code: evaluators, prepare scripts, env
    wrappers): once per path, unless `fresh` (another path under the same name, as when one process plays several
    tasks' workspaces, replaces it); `fresh` executes it anew (a task's prepare script and evaluator, so a
    long-lived grader runs the code on disk). A missing file is a FileNotFoundError; a file that fails to run
    leaves nothing registered under `name`."""
    path = Path(path)
    loaded = sys.modules.get(name)
    if fresh or loaded is None or Path(loaded.__file__ or "").resolve() != path.resolve():
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such task module")
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None, path
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # before exec, so dataclasses in it can resolve their module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(name, None)
            raise
    return sys.modules[name]
