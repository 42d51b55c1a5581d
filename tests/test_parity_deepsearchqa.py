"""deepsearchqa's `paper` protocol against the reference (tests/fixtures/parity/deepsearchqa.json, written by
tools/parity/deepsearchqa.py running RD-Agent's DeepSearchQAEvaluator._react_loop, _serpapi_search and
_judge_answer on scripted model continuations): the same prompts, stops, searches, answer, judge prompt and verdict
on every case. Where `a2rl` differs, and why, is listed."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from a2rl.llm.stops import stop_strings
from a2rl.spec.tasks import get_task
from a2rl.tasklib.evaluator import load_evaluator
from conftest import FIXTURES
from fakes import FakeGenerator

ev = load_evaluator(get_task("deepsearchqa"))
PARITY = json.loads((FIXTURES / "parity" / "deepsearchqa.json").read_text())
CASES = PARITY["cases"]

# case index → why a2rl's verdict differs from the reference's
A2RL_DIFFERS = {
    0: "a2rl stops only at \\nObservation:, so the action on its own line runs the search (no forced answer)",
    2: "an empty answer is wrong without a judge call (the reference's judge called it correct)",
    4: "a2rl takes the first answer[...], the reference's placeholder included",
    9: "a2rl's stop at \\nObservation: keeps the Thought line, whose answer[Paris] is taken",
    10: "a2rl reads the verdict's first word; the reference needs the whole first line to be 'correct'",
}


class Snippets:
    """A search backend whose results are the fixture's snippets for each query."""

    def __init__(self):
        self.queries: list[str] = []

    def search(self, query: str) -> list[dict[str, str]]:
        self.queries.append(query)
        return [{"title": "t", "url": "u", "snippet": s} for s in PARITY["snippets"].get(query, [])]


def _row(case) -> dict[str, str]:
    return {"problem": case["question"], "answer_type": case["answer_type"], "answer": case["gold"]}


@pytest.mark.parametrize("case", CASES, ids=range(len(CASES)))
def test_paper_agrees_with_the_reference(case):
    gen, backend = FakeGenerator(replies=case["continuations"], cut=True), Snippets()
    assert ev.paper_react(gen, [_row(case)], backend, max_steps=6, batch_size=1) == [case["predicted"]]
    assert gen.prompts == case["prompts"]
    assert [list(stop_strings(s)) for s in gen.stops] == case["stops"]
    assert backend.queries == case["queries"]
    assert ev.paper_judge_messages(_row(case), case["predicted"]) == case["judge_messages"]
    assert ev.paper_verdict(case["judge_reply"]) is case["correct"]


def _a2rl_correct(case) -> bool:
    """a2rl's loop on the same continuations (an empty one once they run out). An empty answer is wrong without a
    judge; the fixture's judge reply stands only for the answer it judged, so another answer counts as a
    difference."""
    outputs = case["continuations"] + [""] * 6
    gen = FakeGenerator(replies=outputs, cut=True, tokenizer=SimpleNamespace(chat_template=None))
    (answer,), _ = ev.react(gen, [_row(case)], Snippets(), max_steps=6, max_new_tokens=128, batch_size=1)
    if not answer:
        return False
    if answer != case["predicted"]:
        return not case["correct"]
    return ev.verdict(case["judge_reply"]) is True


def test_where_a2rl_differs_and_why():
    differs = {i for i, c in enumerate(CASES) if _a2rl_correct(c) is not c["correct"]}
    assert differs == set(A2RL_DIFFERS)
    assert (len(CASES) - len(differs), len(CASES)) == (6, 11)  # the figures in docs/tasks.md's protocol table
