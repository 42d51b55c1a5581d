"""Score deepsearchqa: a ReAct loop with a search tool, final answers judged correct/incorrect by an LLM.

The loop (format in description.md) runs every open question one step at a time, batched: the policy writes a
Thought and an Action, Search[query] runs the search backend and appends its results as an Observation,
Finish[answer] ends the question. `answer[...]`, the reference implementation's spelling, is read as Finish.

Unlike the reference, an empty or missing answer is incorrect and never sent to the judge (the reference's
fallback string matcher marks an empty answer correct, since "" is a substring of every gold answer), and a
judge failure is an error (JudgeError), never a silent fallback.
"""

from __future__ import annotations

import importlib
import json
import math
import re
from collections import Counter
from pathlib import Path
from typing import Any, Protocol

from a2rl.grading.judge import ChatClient, Messages, chat_prompt

REACT_SYSTEM = """Answer the question by alternating Thought, Action and Observation steps.
Each step, write "Thought: <your reasoning>" and then "Action: <action>" on its own line, where <action> is one of:
Search[<query>] - search; the results come back as the next Observation.
Finish[<answer>] - give the final answer and stop. For a set answer, list every item, separated by commas.
You have at most {max_steps} actions; answer with Finish before they run out."""
STOP = "\nObservation:"
ACTION = re.compile(r"\b(search|finish|answer)\[(.*?)\]", re.IGNORECASE | re.DOTALL)

JUDGE_SYSTEM = "You are a strict grader of answers to research questions. Reply with one word: correct or incorrect."
JUDGE_USER = """Question: {problem}
Answer type: {answer_type}
Gold answer: {gold}
Predicted answer: {predicted}

A "Single Answer" is correct if it states the same thing as the gold answer. A "Set Answer" is correct if it
contains every item of the gold answer (in any order, minor wording differences allowed).
Is the predicted answer correct or incorrect?"""
JUDGE_MAX_TOKENS = 8


class SearchBackend(Protocol):
    def search(self, query: str) -> list[dict[str, str]]:  # [{title, snippet, url}], best first
        ...


def _terms(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


class BM25Search:
    """Okapi BM25 (k1 = 1.5, b = 0.75) over a JSONL corpus of {"title", "text", "url"}; titles are searched too."""

    def __init__(self, docs: list[dict[str, str]], *, k: int = 3, snippet_chars: int = 300):
        self.docs, self.k, self.snippet_chars = docs, k, snippet_chars
        self.tf = [Counter(_terms(f"{d.get('title', '')} {d['text']}")) for d in docs]
        self.lengths = [sum(tf.values()) for tf in self.tf]
        self.avg_length = sum(self.lengths) / max(1, len(docs))
        df = Counter(t for tf in self.tf for t in tf)
        self.idf = {t: math.log(1 + (len(docs) - n + 0.5) / (n + 0.5)) for t, n in df.items()}

    @classmethod
    def from_options(cls, search: dict[str, Any]) -> BM25Search:
        if not search.get("corpus"):
            raise ValueError("deepsearchqa: set options search.corpus (a JSONL corpus) for the bm25 backend")
        lines = Path(search["corpus"]).read_text(encoding="utf-8").splitlines()
        return cls([json.loads(line) for line in lines if line.strip()], k=int(search.get("k", 3)),
                   snippet_chars=int(search.get("snippet_chars", 300)))

    def search(self, query: str) -> list[dict[str, str]]:
        terms = set(_terms(query)) & self.idf.keys()
        scores = []
        for i, tf in enumerate(self.tf):
            norm = 1.5 * (0.25 + 0.75 * self.lengths[i] / self.avg_length)
            score = sum(self.idf[t] * tf[t] * 2.5 / (tf[t] + norm) for t in terms if t in tf)
            if score > 0:
                scores.append((-score, i))  # ties: corpus order, so results are deterministic
        return [{"title": self.docs[i].get("title", ""), "snippet": self.docs[i]["text"][: self.snippet_chars],
                 "url": self.docs[i].get("url", "")} for _, i in sorted(scores)[: self.k]]


def make_search_backend(search: dict[str, Any]) -> SearchBackend:
    """`bm25`, or "package.module:factory" for another backend (a web API...), called with the search options."""
    backend = search.get("backend", "bm25")
    if backend == "bm25":
        return BM25Search.from_options(search)
    module, _, factory = backend.partition(":")
    return getattr(importlib.import_module(module), factory)(search)


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


def react(generator, rows: list[dict[str, str]], backend: SearchBackend, *, max_steps: int, max_new_tokens: int,
          batch_size: int) -> tuple[list[str], list[int]]:
    """Final answers ("" when the policy never finished) and the number of actions each question took."""
    system = REACT_SYSTEM.format(max_steps=max_steps)
    heads = [chat_prompt(generator.tokenizer, [
        {"role": "system", "content": system},
        {"role": "user", "content": f"Question: {r['problem']}\nAnswer type: {r['answer_type']}"}]) for r in rows]
    traces = ["Thought:"] * len(rows)
    answers, steps = [""] * len(rows), [0] * len(rows)
    open_ = list(range(len(rows)))
    for _ in range(max_steps):
        outputs = generator.generate([heads[i] + traces[i] for i in open_], max_new_tokens=max_new_tokens,
                                     batch_size=batch_size, stop=STOP)
        still_open = []
        for i, out in zip(open_, outputs):
            steps[i] += 1
            action = parse_action(out)
            if action is None:
                traces[i] += out + "\nObservation: No valid action. Use Search[query] or Finish[answer].\nThought:"
                still_open.append(i)
            elif action[0] == "finish":
                answers[i] = action[1]
            else:
                traces[i] += f"{action[2]}\nObservation: {format_results(backend.search(action[1]))}\nThought:"
                still_open.append(i)
        open_ = still_open
        if not open_:
            break
    return answers, steps


def judge_messages(row: dict[str, str], predicted: str) -> Messages:
    return [{"role": "system", "content": JUDGE_SYSTEM},
            {"role": "user", "content": JUDGE_USER.format(problem=row["problem"], answer_type=row["answer_type"],
                                                          gold=row["answer"], predicted=predicted)}]


def verdict(text: str) -> bool | None:
    """True for "correct", False for "incorrect" (the first word), None for anything else."""
    word = re.match(r"\W*(\w+)", text.lower())
    return {"correct": True, "incorrect": False}.get(word.group(1) if word else "")


def evaluate(generator, heldout_dir: Path, options: dict) -> dict:
    rows = [json.loads(line) for line in (Path(heldout_dir) / "test.jsonl").read_text().splitlines() if line]
    client = ChatClient.from_options(options["judge"])
    search = options["search"]
    answers, steps = react(generator, rows, make_search_backend(search), max_steps=int(options.get("max_steps", 6)),
                           max_new_tokens=int(options.get("max_new_tokens", 128)),
                           batch_size=int(options.get("batch_size", 32)))
    answered = [i for i, a in enumerate(answers) if a]  # an empty answer is wrong: the judge never sees it
    verdicts = [verdict(c.text) for c in client.chat_many([judge_messages(rows[i], answers[i]) for i in answered],
                                                          max_tokens=JUDGE_MAX_TOKENS)]
    correct = sum(v is True for v in verdicts)
    return {"score": 100 * correct / len(rows), "n": len(rows), "correct": correct, "answered": len(answered),
            "unparsed_verdicts": sum(v is None for v in verdicts), "mean_steps": sum(steps) / len(rows),
            "search": search, "judge": client.describe()}
