"""DeepSearchQA's protocol `paper`: the reference's loop (its stop at "\\nAction:", the forced answer[, the
placeholder check, "I don't know"), its judge prompt and verdict; search backends of search.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from a2rl.spec.tasks import get_task
from a2rl.tasklib.evaluator import load_evaluator
from fakes import FakeGenerator
from test_judge import completion, stub_llm

FIXTURES = Path(__file__).parent / "fixtures" / "deepsearchqa"
TASK = get_task("deepsearchqa")
ev = load_evaluator(TASK)
ROWS = [{"problem": "Capital of Cagoren1?", "answer": "Fahalis1", "answer_type": "Single Answer"}]


class Recorder:
    def __init__(self):
        self.queries: list[str] = []

    def search(self, query: str) -> list[dict[str, str]]:
        self.queries.append(query)
        return [
            {"title": "Cagoren1", "snippet": "Its capital city is Fahalis1.", "url": "u"},
            {"title": "x", "snippet": "second", "url": "v"},
        ]


def _react(replies: list[str], max_steps: int = 6) -> tuple[list[str], FakeGenerator, Recorder]:
    gen, backend = FakeGenerator(replies=replies, cut=True), Recorder()
    return ev.paper_react(gen, ROWS, backend, max_steps=max_steps, batch_size=4), gen, backend


def test_an_action_on_its_own_line_is_cut_off_and_the_answer_forced():
    answers, gen, backend = _react([" I should search.\nAction: search[Cagoren1 capital]", " Paris"])
    assert answers == ["Paris"] and backend.queries == []  # the search never ran
    assert gen.stops == [ev.PAPER_STOP, "]"]
    assert gen.prompts[0] == (
        f"{ev.PAPER_SYSTEM}\n\nQuestion: Capital of Cagoren1?\nAnswer type: Single Answer\n\nThought:"
    )
    assert gen.prompts[1] == gen.prompts[0] + " I should search.\nAction: answer["


def test_an_inline_search_runs_and_an_empty_forced_answer_is_the_answer():
    answers, gen, backend = _react([" look it up. Action: search[Cagoren1 capital]", " done", "  "])
    assert backend.queries == ["Cagoren1 capital"] and answers == [""]
    assert "\nObservation: Its capital city is Fahalis1. | second\nThought: done\nAction: answer[" in gen.prompts[2]


def test_the_placeholder_is_rejected_and_the_last_real_answer_kept_after_the_last_step():
    answers, gen, _ = _react(
        [" ok Action: answer[Your final answer]", " ok Action: answer[Fahalis1] Action: answer[your final answer]"],
        max_steps=2,
    )
    assert "\nThat is not a valid answer. Please think again.\nThought:" in gen.prompts[1]
    assert answers == ["Fahalis1"]  # the first answer[...] of step 2 is real, so it is taken at once
    answers, _, _ = _react([" x", "your final answer"], max_steps=1)
    assert answers == ["I don't know"]


def test_paper_sends_empty_answers_to_the_judge_with_its_prompt(tmp_path):
    (tmp_path / "heldout").mkdir()
    (tmp_path / "heldout" / "test.jsonl").write_text(
        '{"problem": "Capital of Cagoren1?", "answer": "Fahalis1", "answer_type": "Single Answer"}\n'
    )
    ev.search.build_index(
        [{"title": "t", "text": "Its capital city is Fahalis1.", "url": "u"}], tmp_path / "corpus.sqlite"
    )
    with stub_llm(lambda body, headers: (200, completion("Correct.\nbecause"))) as (url, seen):
        details = ev.evaluate(
            FakeGenerator(replies=[" hmm", ""], cut=True),
            tmp_path / "heldout",
            {
                **TASK.spec.eval,
                "search": {"backend": "local", "corpus": str(tmp_path / "corpus.sqlite")},
                "judge": {"base_url": url, "model": "stub-judge", "retries": 0},
            },
        )
    assert details["answered"] == 0 and details["correct"] == 1 and details["score"] == 100.0  # the quirk
    prompt = seen[0]["body"]["messages"][-1]["content"]
    assert seen[0]["body"]["messages"][0]["content"] == ev.PAPER_JUDGE_SYSTEM and "Predicted answer: \n" in prompt
    assert not ev.paper_verdict("incorrect") and ev.paper_verdict(" Correct!\nyes") and not ev.paper_verdict("")


def test_backends_by_name(monkeypatch, tmp_path):
    monkeypatch.delenv("SERPAPI_KEY", raising=False)
    ev.search.build_index([{"title": "t", "text": "x"}], tmp_path / "c.sqlite")
    make = ev.search.make_backend
    assert isinstance(make({"backend": "auto", "corpus": str(tmp_path / "c.sqlite")}), ev.search.LocalSearch)
    with pytest.raises(ValueError, match="SERPAPI_KEY"):
        make({"backend": "serpapi"})
    monkeypatch.setenv("SERPAPI_KEY", "k")
    assert isinstance(make({"backend": "auto"}), ev.search.SerpAPISearch)
    assert isinstance(make({"backend": "duckduckgo"}), ev.search.DuckDuckGoSearch)
    with pytest.raises(ValueError, match="unknown search backend 'bing'"):
        make({"backend": "bing"})
