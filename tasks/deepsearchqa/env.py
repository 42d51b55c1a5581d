"""DeepSearchQA as a text environment (shipped to the agent as $DATA_PATH/env.py, next to search.py and the
search corpus): one episode per train question, the actions of protocol `a2rl`'s ReAct loop.

    import sys; sys.path.insert(0, DATA_PATH)
    import env
    e = env.make_env(DATA_PATH, "0")                 # train.jsonl's first question
    obs = e.reset()                                  # "Question: ...\nAnswer type: ..."
    obs, reward, done, info = e.step("Search[capital of Encais0]")   # the search backend's results
    obs, reward, done, info = e.step("Finish[Borcaca0]")             # done; reward 1 if the answer matches

Both protocols' loops live here as transcripts (A2rlTranscript, PaperTranscript) and the evaluator plays its
held-out questions through them, as the reference agent builds its training prompts through them. The experts'
traces have no thoughts: an expert step's reply is the action alone, after an empty thought under a2rl
("Thought:\nAction: Search[...]") and on the thought's line under paper ("Thought: Action: search[...]", since
paper stops generating at "\nAction:"). The grader's judge is an LLM; for training rewards `matches` applies the
rule its prompt states (a single answer states the gold answer; a set answer holds every gold item) as a string
check, so rewards need no judge and no network.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

try:  # the grader, or an agent environment with a2rl installed
    from a2rl.tasklib.envs import Fits, Render, Transcript, load_module
except ImportError:  # the agent's workspace: prepare ships a2rl/tasklib/envs.py next to this file as react.py
    from react import Fits, Render, Transcript, load_module  # type: ignore[no-redef]

search = load_module(Path(__file__).with_name("search.py"), "a2rl_task_deepsearchqa_search")

MAX_STEPS = 6  # task.yaml's eval.max_steps, which the instructions state
TRAIN_SEARCH = {"backend": "local", "k": 3, "snippet_chars": 300}  # task.yaml's eval.search, over the agent's corpus
REACT_SYSTEM = """Answer the question by alternating Thought, Action and Observation steps.
Each step, write "Thought: <your reasoning>" and then "Action: <action>" on its own line, where <action> is one of:
Search[<query>] - search; the results come back as the next Observation.
Finish[<answer>] - give the final answer and stop. For a set answer, list every item, separated by commas.
You have at most {max_steps} actions; answer with Finish before they run out."""
INVALID = "No valid action. Use Search[query] or Finish[answer]."
ACTION = re.compile(r"\b(search|finish|answer)\[(.*?)\]", re.IGNORECASE | re.DOTALL)
STOP = "\nObservation:"  # a2rl: where each step's generation stops
MAX_NEW_TOKENS = {
    "paper": 256,
    "a2rl": 128,
}  # per step: the reference's; task.yaml's eval.max_new_tokens (a test checks)

# ---- protocol `paper`: the reference's prompt and loop (autorl_bench deepsearchqa/eval.py)
PAPER_SYSTEM = """You are a research assistant that answers questions by searching the web.

You must follow this format strictly:
Thought: [your reasoning]
Action: search[your search query]   <- to search the web
  OR
Action: answer[Paris]   <- to give final answer

Rules:
- Always start with a Thought
- Use search[] to find information
- Use answer[] ONLY when you have enough information
- For Set Answer questions, list all items separated by commas
- Be concise and factual
"""
PAPER_STOP = ("\nAction:", "\nThought:", "\nObservation:")
PAPER_ACTION = re.compile(r"Action:\s*(search|answer)\[(.+?)\]", re.DOTALL)
PLACEHOLDER = "your final answer"


def question_turn(row: dict[str, str]) -> str:
    return f"Question: {row['problem']}\nAnswer type: {row['answer_type']}"


def parse_action(step: str) -> tuple[str, str, str] | None:
    """(kind "search" | "finish", argument, the step cut after its action) for the step's first action."""
    m = ACTION.search(step)
    if m is None:
        return None
    kind = m.group(1).lower()
    return ("search" if kind == "search" else "finish"), m.group(2).strip(), step[: m.end()]


def format_results(results: list[dict[str, str]]) -> str:
    if not results:
        return "No results."
    return " ".join(f"[{i}] {r['title']} ({r['url']}): {r['snippet']}" for i, r in enumerate(results, 1))


def _words(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.lower()))


def matches(gold: str, answer_type: str, predicted: str) -> bool:
    """Whether `predicted` states the gold answer (every comma-separated gold item for a "Set Answer"), compared
    as lowercase words."""
    items = [gold] if answer_type != "Set Answer" else gold.split(",")
    said = f" {_words(predicted)} "
    wanted = [_words(i) for i in items if _words(i)]
    return bool(wanted) and all(f" {w} " in said for w in wanted)


class SearchQAEnv:
    """One train question. Search[q] observes the backend's results; Finish[a] ends the episode with reward 1 if
    `a` matches the gold answer (info["won"]); anything else is invalid and changes nothing."""

    def __init__(self, row: dict[str, str], backend: Any):
        self.row, self.backend = row, backend

    def reset(self) -> str:
        return question_turn(self.row)

    def step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        parsed = parse_action(action)
        if parsed is None:
            return INVALID, 0.0, False, {"won": False, "valid": False}
        kind, argument, _ = parsed
        if kind == "search":
            return format_results(self.backend.search(argument)), 0.0, False, {"won": False, "valid": bool(argument)}
        won = matches(self.row["answer"], self.row["answer_type"], argument)
        return ("Correct." if won else "Incorrect."), float(won), True, {"won": won, "valid": bool(argument)}


def paper_observation(results: list[dict[str, str]]) -> str:
    """The reference's SerpAPI observation: the snippets joined by " | "."""
    return " | ".join(r["snippet"] for r in results) or "No results found."


class A2rlTranscript(Transcript):
    """Protocol `a2rl`'s loop for one question: REACT_SYSTEM and the question turn in the policy's chat template,
    then the trace "Thought:<step>\\nObservation: <results>\\nThought:..."; each step is generated up to STOP and
    its first action taken (the step cut after it); Finish ends the question with its answer."""

    stop, max_new_tokens = STOP, MAX_NEW_TOKENS["a2rl"]

    def __init__(self, env: SearchQAEnv, max_steps: int = MAX_STEPS):
        self.env, self.system, self.trace, self.answer = env, REACT_SYSTEM.format(max_steps=max_steps), "Thought:", ""
        self.actions, self.done, self.won, self.reward = [], False, False, 0.0

    def prompt(self, render: Render, fits: Fits | None = None) -> str:
        return (
            render(
                [{"role": "system", "content": self.system}, {"role": "user", "content": question_turn(self.env.row)}]
            )
            + self.trace
        )

    @staticmethod
    def read(completion: str) -> str:
        return completion.split(STOP, 1)[0]

    def reply(self, action: str) -> str:
        return f"\nAction: {action}{STOP}"

    def step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        observation, reward, done, info = self.env.step(action)
        parsed = parse_action(action)
        self.actions.append(action)
        if done:
            self.answer, self.done, self.won, self.reward = parsed[1], True, info["won"], reward
        else:
            self.trace += f"{parsed[2] if parsed else action}\nObservation: {observation}\nThought:"
        return observation, reward, done, info


class PaperTranscript(Transcript):
    """Protocol `paper`'s loop for one question (the reference's _react_loop): a raw prompt; each step is generated
    up to PAPER_STOP, stripped and appended; its "Action: search[q]" appends the snippets as an Observation, its
    answer[a] ends the question. A step without an action leaves the prompt open at "\\nAction: answer[" (`forced`):
    the evaluator then generates the answer up to "]" (`force`); training rewards count such a step as invalid."""

    stop, max_new_tokens = PAPER_STOP, MAX_NEW_TOKENS["paper"]

    def __init__(self, env: SearchQAEnv):
        row = env.row
        self.env, self.answer, self.forced = env, "", False
        self.text = (
            f"{PAPER_SYSTEM}\n\nQuestion: {row['problem']}\nAnswer type: "
            f"{row.get('answer_type') or 'Single Answer'}\n\nThought:"
        )
        self.actions, self.done, self.won, self.reward = [], False, False, 0.0

    def prompt(self, render: Render | None = None, fits: Fits | None = None) -> str:
        return self.text

    @staticmethod
    def read(completion: str) -> str:
        cut = min((i for i in (completion.find(s) for s in PAPER_STOP) if i >= 0), default=len(completion))
        return completion[:cut].strip()

    def reply(self, action: str) -> str:
        kind, argument, _ = parse_action(action)
        return f" Action: {'search' if kind == 'search' else 'answer'}[{argument}]\nObservation:"

    def step(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        self.text += f" {action}"
        self.actions.append(action)
        m = PAPER_ACTION.search(action)
        if m is None:
            self.text += "\nAction: answer["
            self.forced = True
            return "", 0.0, False, {"won": False, "valid": False}
        kind, argument = m.group(1), m.group(2).strip()
        if kind == "answer" and argument.lower() == PLACEHOLDER:
            self.text += "\nThat is not a valid answer. Please think again.\nThought:"
            return "", 0.0, False, {"won": False, "valid": False}
        if kind == "answer":
            self.answer, self.done = argument, True
            self.won = matches(self.env.row["answer"], self.env.row["answer_type"], argument)
            self.reward = float(self.won)
            return ("Correct." if self.won else "Incorrect."), self.reward, True, {"won": self.won, "valid": True}
        observation = paper_observation(self.env.backend.search(argument))
        self.text += f"\nObservation: {observation}\nThought:"
        return observation, 0.0, False, {"won": False, "valid": True}

    def force(self, answer: str) -> None:
        """The forced answer's generation (up to "]"): the answer, unless it is the placeholder, which leaves the
        prompt open at "answer[" for the next step."""
        self.forced = False
        if answer.lower() != PLACEHOLDER:
            self.answer, self.done = answer, True


def question_transcript(env: SearchQAEnv, protocol: str, max_steps: int = MAX_STEPS) -> Transcript:
    """A question's episode as the protocol's loop prompts for it."""
    if protocol == "paper":
        return PaperTranscript(env)
    if protocol == "a2rl":
        return A2rlTranscript(env, max_steps)
    raise ValueError(f"deepsearchqa: unknown protocol {protocol!r} (paper or a2rl)")


def _rows(data_dir: str | Path) -> list[dict[str, str]]:
    lines = (Path(data_dir) / "train.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def prompt_header(data_dir: str | Path, episode: str) -> str:
    """The common protocol (a2rl/tasklib/envs.py): protocol `a2rl`'s instructions, one header for every question."""
    return REACT_SYSTEM.format(max_steps=MAX_STEPS)


def train_episodes(data_dir: str | Path) -> list[str]:
    """A training episode is a question's index in train.jsonl."""
    return [str(i) for i in range(len(_rows(data_dir)))]


def make_env(data_dir: str | Path, episode: str) -> SearchQAEnv:
    backend = search.make_backend({**TRAIN_SEARCH, "corpus": str(Path(data_dir) / "corpus.sqlite")})
    return SearchQAEnv(_rows(data_dir)[int(episode)], backend)


def transcript(data_dir: str | Path, episode: str, protocol: str, env: SearchQAEnv | None = None) -> Transcript:
    """The common protocol: a train question as the protocol's grader loop prompts for it."""
    return question_transcript(env or make_env(data_dir, episode), protocol)
