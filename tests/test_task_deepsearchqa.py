"""deepsearchqa: the reference's seed-42 split, protocol a2rl's ReAct parsing, the local search backend, and grading
with a stub judge (a real HTTP server in place of the remote LLM)."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest
from datasets import Dataset

from a2rl.grading.evaluate import evaluate_model
from a2rl.spec.tasks import CANARY, get_task
from a2rl.tasklib.evaluator import load_evaluator
from a2rl.tasklib.prepare import ensure_prepared
from a2rl.tasklib.taskdata import read_jsonl
from fakes import FakeGenerator
from test_judge import completion, stub_llm

FIXTURES = Path(__file__).parent / "fixtures" / "deepsearchqa"
TASK = get_task("deepsearchqa")
ev = load_evaluator(TASK)


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("data")
    ensure_prepared(TASK, root, source=FIXTURES)
    return root


def test_split_is_the_references_seed_42_shuffle(data_root: Path, tmp_path: Path) -> None:
    with open(FIXTURES / "DSQA-full.csv", newline="", encoding="utf-8") as f:
        upstream = list(csv.DictReader(f))
    shuffled = Dataset.from_list(upstream).shuffle(seed=42).to_list()  # what the reference does
    data = TASK.data(data_root)
    train, heldout = read_jsonl(data.train_dir / "train.jsonl"), read_jsonl(data.heldout_dir / "test.jsonl")
    assert train == shuffled[:100] and heldout == shuffled[100:300]
    assert any("\n" in r["problem"] for r in heldout)  # quoted multi-line CSV fields survive
    ensure_prepared(TASK, tmp_path, source=FIXTURES)  # reproducible: byte-identical files
    ours, theirs = TASK.prepared(tmp_path).checksums, TASK.prepared(data_root).checksums
    canary = f"heldout/{CANARY}"  # new with every preparation, by design
    assert ours.pop(canary) != theirs.pop(canary) and ours == theirs


@pytest.mark.parametrize(
    "step, expected",
    [
        (" I should look.\nAction: Search[capital of Encais0]", ("search", "capital of Encais0")),
        (" Done.\nAction: Finish[Borcaca0, Fahalis1]\nThought: more", ("finish", "Borcaca0, Fahalis1")),
        (" lowercase works\naction: search[x y]", ("search", "x y")),
        (" the reference's spelling\nAction: answer[Paris]", ("finish", "Paris")),
        (" empty\nAction: Finish[ ]", ("finish", "")),
        (" first wins\nAction: Finish[A] Search[B]", ("finish", "A")),
        (" no action here, just talk", None),
        (" unclosed\nAction: Search[oops", None),
    ],
)
def test_parse_action(step: str, expected: tuple[str, str] | None) -> None:
    parsed = ev.parse_action(step)
    assert (parsed and parsed[:2]) == expected
    if parsed:
        assert parsed[2].endswith("]") and step.startswith(parsed[2])  # the step is cut after its action


def test_local_search_finds_the_document_and_is_deterministic(data_root: Path) -> None:
    corpus = TASK.data(data_root).train_dir / "corpus.sqlite"  # prepare indexed the fixture's corpus.jsonl
    backend = ev.search.make_backend({"backend": "local", "corpus": str(corpus), "k": 2, "snippet_chars": 40})
    results = backend.search("What is the capital city of Cagoren1?")
    assert results[0]["title"] == "Cagoren1" and results[0]["url"].endswith("/Cagoren1")
    assert len(results) == 2 and len(results[0]["snippet"]) == 40 and backend.search("Cagoren1 capital") == results[:2]
    assert backend.search("zzz unknown words") == [] and backend.search("?!") == []
    with pytest.raises(FileNotFoundError, match="a2rl prepare deepsearchqa"):
        ev.search.make_backend({"backend": "local", "corpus": str(data_root / "none.sqlite")})


def scripted_step(prompt: str) -> str:
    """The LLM policy's next step: search the country of its question, then answer from the first result; some
    questions it answers with Finish[], some never finish."""
    country = re.search(r"(?:capital city of|capital of|flow through) (\w+)", prompt).group(1)
    observations = re.findall(r"\nObservation: (.*)\nThought:", prompt)
    if int(country[-1]) % 3 == 1:
        return " I give up.\nAction: Finish[]"
    if int(country[-1]) % 3 == 2:
        return " Hmm, let me think about it some more."
    if not observations:
        return f" I need the capital.\nAction: Search[{country} capital]\nObservation: (hallucinated)"
    capital = re.search(r"Its capital city is (\w+)\.", observations[-1]).group(1)
    return f" Found it.\nAction: Finish[{capital}]"


def test_grading_judges_only_real_answers(tiny_model: Path, data_root: Path) -> None:
    from a2rl.llm.inference import Generator

    rows = read_jsonl(TASK.data(data_root).heldout_dir / "test.jsonl")
    policy = FakeGenerator(script=scripted_step, tokenizer=Generator.load(tiny_model).tokenizer)

    def reply(body: dict, headers: dict) -> tuple[int, dict]:
        prompt = body["messages"][-1]["content"]
        gold, predicted = re.search(r"Gold answer: (.*)\nPredicted answer: (.*)\n\n", prompt).groups()
        assert predicted.strip()  # an empty answer never reaches the judge
        return 200, completion("Correct." if predicted == gold else "incorrect")

    with stub_llm(reply) as (url, seen):
        options = {
            **TASK.spec.eval,
            "protocol": "a2rl",
            "judge": {"base_url": url, "model": "stub-judge", "retries": 0},
        }
        details = ev.evaluate(policy, TASK.data(data_root).heldout_dir, options)
    digit = [int(re.search(r"(\d)\b", r["problem"].split("?")[0]).group(1)) % 3 for r in rows]
    searched = [r for r, d in zip(rows, digit) if d == 0]
    # Set answers (two rivers) get the capital: judged incorrect. Single answers are right.
    right = sum(r["answer_type"] == "Single Answer" for r in searched)
    assert len(seen) == details["answered"] == len(searched)  # Finish[] and never-finished: no judge call
    assert details["correct"] == right > 0 and details["score"] == pytest.approx(100 * right / len(rows))
    assert set(policy.stops) == {"\nObservation:"}
    assert policy.calls == 6 and details["mean_steps"] > 1  # never-finishers run out the 6 steps
    assert details["judge"]["version"] == "stub-judge-2024-01-01" and details["unparsed_verdicts"] == 0


@pytest.mark.slow  # > 5 s: the tiny model end to end
def test_grading_the_real_model_end_to_end(tiny_model: Path, data_root: Path, tmp_path: Path) -> None:
    """Through the grader and the real backend: the untrained model writes no action, so nothing is answered and
    the judge (any failure of which would raise) is never called."""
    small = tmp_path / "deepsearchqa"
    (small / "heldout").mkdir(parents=True)
    rows = read_jsonl(TASK.data(data_root).heldout_dir / "test.jsonl")[:4]
    (small / "heldout" / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with stub_llm(lambda body, headers: (500, {})) as (url, seen):
        options = {
            "max_new_tokens": 16,
            "search": {"backend": "local", "corpus": str(TASK.data(data_root).train_dir / "corpus.sqlite")},
            "judge": {"base_url": url, "model": "stub-judge", "retries": 0},
        }
        score, details = evaluate_model(
            TASK, tiny_model, tiny_model, data_root=tmp_path, protocol="a2rl", options=options
        )
    assert score == 0 and details["answered"] == 0 and details["mean_steps"] == 6 and not seen


def test_a_backend_plugs_in_by_import_path() -> None:
    backend = ev.search.make_backend({"backend": f"{__name__}:fixed_backend", "title": "T"})
    assert backend.search("anything") == [{"title": "T", "snippet": "s", "url": "u"}]


def fixed_backend(options: dict):
    class Fixed:
        def search(self, query: str) -> list[dict[str, str]]:
            return [{"title": options["title"], "snippet": "s", "url": "u"}]

    return Fixed()
