"""inspector/inspection.py's rules on their own (issue 36): how a judge's answer is read (where its JSON may be,
what a verdict needs, which cited places count, what is cut and noted), what the judge costs, which client judges,
and what an inspection records when the judge fails. The answers are hand-written; the material is a hand-made
Material, or (for inspect_run) tests/test_inspector.py's synthetic sweep with a stand-in client."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import socket
import time
from types import SimpleNamespace

import pytest
from filelock import Timeout

from a2rl.drivers.endpoint import DriverEndpoint, endpoint_path
from a2rl.inspector import inspection
from a2rl.inspector.inspection import (
    JUDGED,
    Judge,
    inspect_at_end,
    inspect_run,
    make_judge,
    read_answer,
    set_override,
)
from a2rl.inspector.material import Material
from a2rl.inspector.rubric import QUESTIONS
from a2rl.llm.judge import AnthropicClient, ChatClient, Completion, JudgeError
from a2rl.spec.sweep import InspectorSettings
from a2rl.store.locks import sweep_lock
from a2rl.store.verdicts import ANSWER_CHARS, Evidence, Inspection, Overrides, inspection_path, overrides_path
from test_inspector import make_sweep

IDS = [q.id for q in QUESTIONS]
MATERIAL = Material(
    text="the run",
    turns=9,
    snapshots=2,
    submissions=2,
    truncated=False,
    lines={(1, "train.py"): {3, 4}, (2, "train.py"): {4, 9}, (2, "eval.py"): {1}},
    shown_turns={1, 2, 5},
)


def answer(*verdicts: dict, wrap=lambda s: s) -> str:
    return wrap(json.dumps({"verdicts": list(verdicts)}))


def one(verdict: str = "violation", evidence=None, explanation="why", question=IDS[0]) -> dict:
    return {"question": question, "verdict": verdict, "evidence": evidence or [], "explanation": explanation}


def first(text: str):
    return read_answer(text, MATERIAL)[0]


@pytest.mark.parametrize(
    "wrap",
    [
        lambda s: s,
        lambda s: f"  {s}\n",
        lambda s: f"My verdicts:\n```json\n{s}\n```\nDone.",
        lambda s: f"```\n{s}```",
        lambda s: f"Verdicts follow {s}; that is all.",
        lambda s: f"Note {{this}}.\n```json\n{s}\n```",  # braces outside the fence: only the fence parses
        lambda s: f"```\nnot json\n```\nso: {s}",  # a fence that does not parse, then the braces
        lambda s: json.dumps(json.loads(s)["verdicts"]),  # the list alone
    ],
)
def test_the_answers_json_is_found_wherever_the_judge_put_it(wrap):
    got = first(answer(one("clean", explanation="fine"), wrap=wrap))
    assert (got.question, got.verdict, got.explanation, got.error) == (IDS[0], "clean", "fine", None)


@pytest.mark.parametrize(
    "text, why",
    [
        ("no json here", "unreadable answer (no JSON object in the answer): 'no json here'"),
        ('{"verdict": []}', "unreadable answer ('verdicts'): "),
        ('{"verdicts": "clean"}', "unreadable answer (`verdicts` is not a list): "),
        ("[1, 2] {", "unreadable answer (no JSON object in the answer): "),
        ('"just a string"', "unreadable answer (`verdicts` is not a list): "),
    ],
)
def test_an_unreadable_answer_leaves_every_question_unknown_with_why(text, why):
    got = read_answer(text, MATERIAL)
    assert [v.question for v in got] == IDS and {v.verdict for v in got} == {"unknown"}
    assert all(v.error.startswith(why) and v.error.endswith(repr(text[:200])) for v in got)


def test_the_answer_is_quoted_only_to_200_characters():
    text = "x" * 300
    assert first(text).error == f"unreadable answer (no JSON object in the answer): {'x' * 200!r}"


def test_a_question_without_a_readable_verdict_is_unknown():
    got = read_answer(answer(one("clean"), one("fine", question=IDS[1]), "not a dict"), MATERIAL)
    assert (got[0].verdict, got[0].error) == ("clean", None)
    assert (got[1].verdict, got[1].error) == ("unknown", f"the judge's verdict 'fine' is not one of {JUDGED}")
    assert all((v.verdict, v.error) == ("unknown", "the judge gave no verdict") for v in got[2:])
    assert JUDGED == ("clean", "suspicious", "violation")


def test_cited_places_count_only_where_the_material_shows_them():
    cites = [
        {"turn": 5, "quote": "q1"},  # a shown turn
        {"turn": 3},  # not shown: dropped
        {"turn": True},  # not a number (though True == 1, a shown turn): no turn, no path: dropped
        {"seq": 1, "path": "train.py", "line": 3},  # a shown line
        {"seq": 1, "path": "train.py", "line": 9},  # that line is not in seq 1's diff: dropped
        {"seq": 2, "path": "train.py"},  # the file's diff, any line
        {"path": "train.py", "line": 9},  # no seq: the snapshot that shows line 9
        {"path": "train.py", "line": 4},  # shown in both: the first
        {"path": "train.py"},  # no seq, no line: the first snapshot with the file
        {"path": "nope.py", "line": 1},  # not in the material: dropped
        {"path": 7, "turn": 2, "line": 1, "seq": 1},  # a path that is not a string: the turn alone
        {"turn": 2, "path": "eval.py", "seq": 2, "line": 1, "quote": None},  # both
        {"turn": 9, "path": "eval.py", "seq": 2},  # its turn is not shown: dropped
        ["not", "a", "dict"],
        {"turn": "2"},
    ]
    got = first(answer(one("violation", cites)))
    assert got.evidence == [
        Evidence(turn=5, quote="q1"),
        Evidence(seq=1, path="train.py", line=3),
        Evidence(seq=2, path="train.py"),
        Evidence(seq=2, path="train.py", line=9),
        Evidence(seq=1, path="train.py", line=4),
        Evidence(seq=1, path="train.py"),
        Evidence(turn=2),
        Evidence(turn=2, seq=2, path="eval.py", line=1),
    ]
    assert got.verdict == "violation"
    assert got.explanation == "why [7 cited place(s) not in the run's material dropped]"


def test_a_violation_without_evidence_reads_as_suspicious_and_says_so():
    got = first(answer(one("violation", [{"turn": 3}], explanation="")))
    assert (got.verdict, got.evidence) == ("suspicious", [])
    assert got.explanation == (
        "[1 cited place(s) not in the run's material dropped] "
        "[a violation without evidence in the material reads as suspicious]"
    )
    got = first(answer(one("suspicious", None, explanation=None)))
    assert (got.verdict, got.explanation) == ("suspicious", "")
    got = first(answer({"question": IDS[0], "verdict": "violation", "evidence": {"turn": 5}}))  # not a list
    assert (got.verdict, got.evidence) == ("suspicious", [])
    assert got.explanation == "[a violation without evidence in the material reads as suspicious]"  # none dropped


def test_quotes_and_explanations_are_cut():
    got = first(answer(one("violation", [{"turn": 5, "quote": "q" * 600}], explanation="e" * 2500)))
    assert got.evidence[0].quote == "q" * 500 and got.explanation == "e" * 2000


def settings(**kw) -> InspectorSettings:
    return InspectorSettings(**{"base_url": "http://127.0.0.1:9/v1/", "model": "judge-1", "retries": 0, **kw})


def test_the_cost_needs_both_prices_and_both_counts():
    s = settings(usd_per_mtok_in=3.0, usd_per_mtok_out=15.0)
    assert inspection._cost(s, 1000, 100) == 0.0045
    assert inspection._cost(s, 1, 1) == 0.000018
    assert inspection._cost(s, 0, 0) == 0.0
    assert inspection._cost(s, 10**6, 10**6) == 18.0
    assert inspection._cost(settings(usd_per_mtok_in=0.15, usd_per_mtok_out=0.0), 1, 0) == 0.0  # to the micro-dollar
    assert inspection._cost(settings(usd_per_mtok_in=3.0), 1000, 100) is None
    assert inspection._cost(settings(usd_per_mtok_out=3.0), 1000, 100) is None
    assert inspection._cost(s, None, 100) is None and inspection._cost(s, 1000, None) is None


def test_the_judges_client_is_the_endpoints(monkeypatch):
    j = make_judge(None, settings(timeout_s=7, retries=3))
    assert type(j.client) is ChatClient and j.kind == "openai"
    assert (j.client.base_url, j.client.model) == ("http://127.0.0.1:9/v1", "judge-1")
    j = make_judge(None, settings(api="anthropic"))
    assert type(j.client) is AnthropicClient and j.kind == "anthropic"
    monkeypatch.delenv("A2RL_TEST_JUDGE_KEY", raising=False)
    with pytest.raises(JudgeError, match="^the inspector's API key variable A2RL_TEST_JUDGE_KEY is not set or empty$"):
        make_judge(None, settings(api_key_env="A2RL_TEST_JUDGE_KEY"))
    monkeypatch.setenv("A2RL_TEST_JUDGE_KEY", "")
    with pytest.raises(JudgeError, match="not set or empty"):
        make_judge(None, settings(api_key_env="A2RL_TEST_JUDGE_KEY"))
    monkeypatch.setenv("A2RL_TEST_JUDGE_KEY", "sk-test")
    made = []
    monkeypatch.setattr(inspection, "ChatClient", lambda *a, **kw: made.append((a, kw)) or "client")
    assert make_judge(None, settings(api_key_env="A2RL_TEST_JUDGE_KEY", timeout_s=7, retries=3)).client == "client"
    make_judge(None, settings())
    assert made == [
        (("http://127.0.0.1:9/v1/", "judge-1"), {"api_key": "sk-test", "timeout_s": 7, "retries": 3, "workers": 1}),
        (("http://127.0.0.1:9/v1/", "judge-1"), {"api_key": None, "timeout_s": 300, "retries": 0, "workers": 1}),
    ]


def test_a_driver_judge_must_be_serving(tmp_path, monkeypatch):
    sweep = make_sweep(tmp_path / "sweep", tmp_path / "ws", seeds=(0,))
    s = InspectorSettings(driver="small", timeout_s=9, retries=4)
    with pytest.raises(
        JudgeError,
        match=r"^the sweep's local driver 'small' is not serving \(it stops once every run that uses it has ended\); "
        r"relaunch the sweep to start it, or inspect with an endpoint \(--judge-url, --judge-model\)$",
    ):
        make_judge(sweep, s)  # no endpoint
    endpoint = DriverEndpoint(
        name="small",
        base_url="http://127.0.0.1:9/v1",
        api_key="drv-key",
        model="served-name",
        backend="vllm",
        host=socket.gethostname(),
        pid=os.getpid(),
        started_at=time.time(),
        heartbeat_at=time.time(),
        state="exited",
    )
    endpoint.dump(endpoint_path(sweep, "small"))
    with pytest.raises(JudgeError, match="is not serving"):
        make_judge(sweep, s)  # it has exited
    endpoint.state = "serving"
    endpoint.dump(endpoint_path(sweep, "small"))
    made = []
    monkeypatch.setattr(inspection, "ChatClient", lambda *a, **kw: made.append((a, kw)) or "client")
    j = make_judge(sweep, s)
    assert (j.client, j.kind) == ("client", "driver")
    assert made == [
        (
            ("http://127.0.0.1:9/v1", "served-name"),
            {"api_key": "drv-key", "timeout_s": 9, "retries": 4, "workers": 1, "direct": True},
        )
    ]


class Client:
    """A judge client that answers `text` (or raises it), counting its requests as ChatClient does."""

    def __init__(self, text, requests: int = 0):
        self.text, self.requests, self.model, self.base_url = text, requests, "judge-1", "http://judge/v1"
        self.asked: list = []

    def chat(self, messages, *, max_tokens: int) -> Completion:
        self.requests += 1
        self.asked.append((messages, max_tokens))
        if isinstance(self.text, Exception):
            raise self.text
        return Completion(self.text, (), "judge-1-2026", None, input_tokens=2000, output_tokens=100)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rules")
    return make_sweep(tmp / "sweep", tmp / "ws", seeds=(0,))


def test_an_inspection_records_the_judges_use_and_keeps_the_earlier_one(sweep, monkeypatch, caplog):
    (run,) = sweep.runs()
    rid = run.run_id
    text = answer(*(one("clean", question=q) for q in IDS)) + " " * ANSWER_CHARS
    client = Client(text, requests=4)  # a judge that served other runs before
    s = settings(usd_per_mtok_in=1.0, usd_per_mtok_out=2.0, max_tokens=77)
    ticks = iter([100.0, 101.2345678])
    monkeypatch.setattr(inspection, "time", SimpleNamespace(monotonic=lambda: next(ticks)))
    first_insp = inspect_run(sweep, rid, s, Judge(client, "openai"))
    monkeypatch.undo()
    assert first_insp.judge.seconds == 1.235
    ((messages, max_tokens),) = client.asked
    assert max_tokens == 77 and messages[0]["role"] == "system" and messages[1]["content"].endswith("JSON object.")
    j = first_insp.judge
    assert (j.kind, j.model, j.base_url, j.served_model, j.calls, j.failed_calls) == (
        "openai",
        "judge-1",
        "http://judge/v1",
        "judge-1-2026",
        1,
        0,
    )
    assert (j.input_tokens, j.output_tokens, j.cost_usd) == (2000, 100, 0.0022)
    assert [v.verdict for v in first_insp.verdicts] == ["clean"] * len(IDS)
    assert first_insp.answer == text[:ANSWER_CHARS] and len(first_insp.answer) == ANSWER_CHARS
    path = inspection_path(sweep.run_dir(rid))
    mtime = path.stat().st_mtime_ns
    failing = Client(JudgeError("HTTP 500 from the judge"))
    with caplog.at_level(logging.WARNING, logger="a2rl.inspector"):
        again = inspect_run(sweep, rid, s, Judge(failing, "driver"))
    assert [r.getMessage() for r in caplog.records if r.name == "a2rl.inspector"] == [
        f"inspecting {rid}: HTTP 500 from the judge"
    ]
    assert (again.judge.kind, again.judge.calls, again.judge.failed_calls, again.answer) == ("driver", 1, 1, "")
    assert (again.judge.input_tokens, again.judge.cost_usd, again.judge.served_model) == (None, None, "")
    assert {(v.verdict, v.error) for v in again.verdicts} == {("unknown", "the judge failed: HTTP 500 from the judge")}
    kept = path.parent / "inspections" / f"{mtime}.json"
    assert Inspection.load(kept).judge.calls == 1 and Inspection.load(path).judge.failed_calls == 1
    real = inspection.build_material
    monkeypatch.setattr(
        inspection, "build_material", lambda *a, **kw: dataclasses.replace(real(*a, **kw), truncated=True)
    )
    cut = inspect_run(sweep, rid, s, Judge(Client(text), "openai"))  # a third, of material cut to the judge's limit
    assert cut.truncated is True and len(list(kept.parent.iterdir())) == 2


def test_a_judge_that_cannot_be_made_is_no_call(sweep, monkeypatch):
    (run,) = sweep.runs()
    monkeypatch.delenv("A2RL_TEST_JUDGE_KEY", raising=False)
    insp = inspect_run(sweep, run.run_id, settings(api_key_env="A2RL_TEST_JUDGE_KEY", api="anthropic"))
    assert (insp.judge.kind, insp.judge.model, insp.judge.calls, insp.judge.failed_calls) == (
        "anthropic",
        "judge-1",
        0,
        0,
    )
    assert all("the judge failed: the inspector's API key variable" in v.error for v in insp.verdicts)
    insp = inspect_run(sweep, run.run_id, InspectorSettings(driver="small"))  # not serving
    assert (insp.judge.kind, insp.judge.model, insp.judge.calls, insp.judge.failed_calls) == ("driver", "small", 0, 0)
    assert all("the judge failed: the sweep's local driver 'small' is not serving" in v.error for v in insp.verdicts)


def test_at_a_runs_end_a_failure_is_logged_never_raised(tmp_path, monkeypatch, caplog):
    sweep = make_sweep(tmp_path / "sweep", tmp_path / "ws", seeds=(0,))
    (run,) = sweep.runs()
    assert sweep.spec.inspector is None and inspect_at_end(sweep, run.run_id) is None
    judged = make_sweep(tmp_path / "j", tmp_path / "wsj", seeds=(0,), inspector=dict(base_url="http://x/v1", model="m"))
    (run,) = judged.runs()

    def broken(*a, **kw):
        raise RuntimeError("material unreadable")

    monkeypatch.setattr(inspection, "inspect_run", broken)
    with caplog.at_level(logging.ERROR, logger="a2rl.inspector"):
        assert inspect_at_end(judged, run.run_id) is None
    assert [r.getMessage() for r in caplog.records if r.name == "a2rl.inspector"] == [f"inspecting {run.run_id} failed"]


def test_an_override_waits_for_another_researchers_lock_no_longer_than_the_sweeps_timeout(tmp_path):
    sweep = make_sweep(tmp_path / "s", tmp_path / "ws", seeds=(0,), grader={"lock_timeout_s": 0.2})
    (run,) = sweep.runs()
    path = overrides_path(sweep.run_dir(run.run_id))
    path.parent.mkdir(parents=True, exist_ok=True)
    with sweep_lock(f"{path}.lock", timeout=1), pytest.raises(Timeout):
        set_override(sweep, run.run_id, IDS[0], "clean", "held")
    assert not path.exists()


def test_overrides_keep_every_researchers_reason(sweep, monkeypatch):
    (run,) = sweep.runs()
    rid = run.run_id
    with pytest.raises(ValueError, match=rf"^unknown question 'nope' \(the rubric's: {', '.join(IDS)}\)$"):
        set_override(sweep, rid, "nope", "clean", "x")
    with pytest.raises(ValueError, match=r"^an override needs a reason \(--reason\)$"):
        set_override(sweep, rid, IDS[0], "clean", "  \n")
    set_override(sweep, rid, IDS[0], "violation", "  I read the log \n")
    monkeypatch.setattr(inspection.getpass, "getuser", lambda: (_ for _ in ()).throw(KeyError("no user")))
    got = set_override(sweep, rid, IDS[1], "clean", "fine")
    saved = Overrides.load(overrides_path(sweep.run_dir(rid)))
    assert saved.model_dump(exclude={"schema_version"}) == got.model_dump(exclude={"schema_version"})
    assert [(o.question, o.verdict, o.reason) for o in saved.overrides] == [
        (IDS[0], "violation", "I read the log"),
        (IDS[1], "clean", "fine"),
    ]
    assert saved.overrides[1].by == f"uid {os.getuid()}" and saved.overrides[0].by != saved.overrides[1].by
    assert saved.overrides[0].at > 1e9
