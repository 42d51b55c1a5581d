"""DeepSearchQA as a text environment (shipped to the agent as $DATA_PATH/env.py, next to search.py and the
search corpus): one episode per train question, the actions of protocol `a2rl`'s ReAct loop.

    import sys; sys.path.insert(0, DATA_PATH)
    import env
    e = env.make_env(DATA_PATH, "0")                 # train.jsonl's first question
    obs = e.reset()                                  # "Question: ...\nAnswer type: ..."
    obs, reward, done, info = e.step("Search[capital of Encais0]")   # the search backend's results
    obs, reward, done, info = e.step("Finish[Borcaca0]")             # done; reward 1 if the answer matches

The grader's pieces of protocol `a2rl` live here and its evaluator imports them: the instructions (REACT_SYSTEM),
the question turn, the action syntax and the observation format. The grader's judge is an LLM; for training
rewards `matches` applies the rule its prompt states (a single answer states the gold answer; a set answer holds
every gold item) as a string check, so rewards need no judge and no network.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

try:  # the grader, or an agent environment with a2rl installed
    from a2rl.tasklib.envs import load_module
except ImportError:  # the agent's workspace: prepare ships a2rl/tasklib/envs.py next to this file as react.py
    from react import load_module  # type: ignore[no-redef]

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
