"""alpacaeval's and deepsearchqa's open-weight judges (`judge: {model_path: DIR}`) run on the grader's engine
(EngineJudge), on its backend. The transformers backend runs the real tiny model on CPU; vLLM is driven through
RecordingVLLM, a STAND-IN for vllm.LLM (tests/fakes.py): it proves our plumbing (the judge is asked on the one
engine, its first-token logprobs reach the evaluator), not vLLM."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from a2rl.grading.evaluate import evaluate_model
from a2rl.llm import vllm_backend
from a2rl.llm.backends import CPU_SETTINGS, BackendSettings, Engine
from a2rl.llm.judge import EngineJudge, JudgeError, judge_client
from a2rl.spec.tasks import get_task
from a2rl.tasklib.evaluator import load_evaluator
from a2rl.tasklib.prepare import ensure_prepared
from a2rl.tasklib.taskdata import read_jsonl
from a2rl.weights import weights_hash
from fakes import RecordingSamplingParams, RecordingVLLM

FIXTURES = Path(__file__).parent / "fixtures"
ALPACA, DSQA = get_task("alpacaeval"), get_task("deepsearchqa")
POLICY = "POLICY ANSWER"
SHOWN = re.compile(r'"model_identifier": "(m|M)",\n\s*"output": """(.*?)"""\n', re.S)


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("data")
    ensure_prepared(ALPACA, root, source=FIXTURES / "alpacaeval")
    ensure_prepared(DSQA, root, source=FIXTURES / "deepsearchqa")
    return root


@pytest.fixture
def small_root(data_root: Path, tmp_path: Path) -> Path:
    """A data root with the first 4 held-out rows of each task (and alpacaeval's df_gamed.csv): CPU-cheap."""
    for task in (ALPACA, DSQA):
        heldout = task.data(data_root).heldout_dir
        small = tmp_path / task.name / "heldout"
        small.mkdir(parents=True)
        (small / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in read_jsonl(heldout / "test.jsonl")[:4]))
    (tmp_path / "alpacaeval" / "heldout" / "df_gamed.csv").write_bytes(
        (ALPACA.data(data_root).heldout_dir / "df_gamed.csv").read_bytes()
    )
    return tmp_path


@pytest.fixture
def corpus(data_root: Path) -> Path:
    return DSQA.data(data_root).train_dir / "corpus.sqlite"


def vllm_engine(monkeypatch, reply) -> Engine:
    monkeypatch.setattr(RecordingVLLM, "instances", [])
    monkeypatch.setattr(
        vllm_backend, "vllm_api", lambda: (lambda **kw: RecordingVLLM(reply=reply, **kw), RecordingSamplingParams)
    )
    return Engine(BackendSettings("vllm", "cuda", 1, 0.9, None, None))


def judged_calls() -> list[tuple]:
    """The stand-in's generate calls, in order (the policy's first, the judge's last)."""
    (llm,) = RecordingVLLM.instances
    return [c for c in llm.calls if c[0] == "generate"]


def names_the_engine_judge(details: dict, tiny_model: Path, backend: str, requests: int) -> None:
    assert details["judge"] == {
        "model": "tiny-llama",
        "version": "tiny-llama",
        "system_fingerprint": "wh-" + weights_hash(tiny_model)[:16],
        "model_path": str(tiny_model),
        "backend": backend,
        "requests": requests,
    }


def test_alpacaeval_paper_prefers_from_first_token_logprobs_on_the_vllm_engine(tiny_model, small_root, monkeypatch):
    def reply(prompt: str) -> str:  # the judge names the policy's output, wherever alpaca_eval's coin put it
        shown = dict((o, i) for i, o in SHOWN.findall(prompt))
        return shown[POLICY] if shown else POLICY

    engine = vllm_engine(monkeypatch, reply)
    score, details = evaluate_model(
        ALPACA,
        tiny_model,
        tiny_model,
        data_root=small_root,
        engine=engine,
        options={"judge": {"model_path": str(tiny_model)}},
    )
    names_the_engine_judge(details, tiny_model, "vllm", 4)
    # P(policy) = 1 from the "m"/"M" logprobs on every prompt, mirrored back after alpaca_eval's switch
    assert details["win_rate"] == 100.0 and details["n_wins"] == 4 and details["unparsed_verdicts"] == 0
    assert 0.0 <= score <= 100.0 and details["lc_method"].startswith("alpaca_eval glm")
    judged = judged_calls()[-1]
    assert judged[2] == {"max_tokens": 1, "temperature": 0.0, "logprobs": 5} and len(judged[1]) == 4
    assert (engine.starts, engine.reloads) == (1, 1)  # one engine: the judge is a weights reload


def test_alpacaeval_judges_with_the_real_tiny_model_on_transformers(tiny_model, small_root):
    engine = Engine(CPU_SETTINGS)
    score, details = evaluate_model(
        ALPACA,
        tiny_model,
        tiny_model,
        data_root=small_root,
        engine=engine,
        protocol="a2rl",
        options={"max_new_tokens": 8, "judge": {"model_path": str(tiny_model)}},
    )
    names_the_engine_judge(details, tiny_model, "transformers", 8)  # each prompt judged in both orders
    assert 0.0 <= score <= 100.0 and details["n_total"] == 4


def test_engine_judge_first_token_logprobs_are_what_the_paper_protocol_reads(tiny_model):
    judge = judge_client({"model_path": str(tiny_model)}, Engine(CPU_SETTINGS))
    assert isinstance(judge, EngineJudge)
    (c,) = judge.chat_many(
        [load_evaluator(ALPACA).paper_messages("Say m.", "m", "M")[:1]], max_tokens=1, top_logprobs=5
    )
    assert len(c.first_token_logprobs) == 5
    assert all(isinstance(t, str) and isinstance(lp, float) and lp <= 0 for t, lp in c.first_token_logprobs)
    assert c.first_token_logprobs[0][0] == c.text  # best first: the greedy token, as an endpoint's top_logprobs
    identifiers = {t: lp for t, lp in c.first_token_logprobs if t in ("m", "M")}
    p = load_evaluator(ALPACA).paper_preference(c)
    assert (p is None) == (not identifiers) and (p is None or 1.0 <= p <= 2.0)


def test_deepsearchqa_paper_judges_on_the_vllm_engine(tiny_model, small_root, corpus, monkeypatch):
    rows = read_jsonl(small_root / "deepsearchqa" / "heldout" / "test.jsonl")

    def reply(prompt: str) -> str:  # the judge passes Single Answers only
        if "strict answer evaluator" in prompt:
            return "correct" if "type: Single Answer" in prompt else "incorrect"
        return " I know. Action: answer[Paris]"

    engine = vllm_engine(monkeypatch, reply)
    score, details = evaluate_model(
        DSQA,
        tiny_model,
        tiny_model,
        data_root=small_root,
        engine=engine,
        options={
            "search": {"backend": "local", "corpus": str(corpus)},
            "judge": {"model_path": str(tiny_model), "max_tokens": 3},
        },
    )
    single = sum(r["answer_type"] == "Single Answer" for r in rows)
    assert 0 < single < len(rows)  # both verdicts occur
    assert score == 100 * single / len(rows) and details["correct"] == single
    names_the_engine_judge(details, tiny_model, "vllm", len(rows))
    judged = judged_calls()[-1]
    assert judged[2] == {"max_tokens": 3, "temperature": 0.0, "stop": []} and len(judged[1]) == len(rows)


@pytest.mark.slow  # 5-10 s: the paper loop generates its 256 tokens a step, twice, on the CPU
def test_deepsearchqa_judges_with_the_real_tiny_model_on_transformers(tiny_model, small_root, corpus):
    heldout = small_root / "deepsearchqa" / "heldout" / "test.jsonl"
    heldout.write_text("".join(heldout.read_text().splitlines(keepends=True)[:2]))  # the paper loop is slow on CPU
    score, details = evaluate_model(
        DSQA,
        tiny_model,
        tiny_model,
        data_root=small_root,
        engine=Engine(CPU_SETTINGS),
        options={
            "max_steps": 1,
            "search": {"backend": "local", "corpus": str(corpus)},
            "judge": {"model_path": str(tiny_model), "max_tokens": 3},
        },
    )
    names_the_engine_judge(details, tiny_model, "transformers", 2)  # the paper loop answers every question
    assert 0.0 <= score <= 100.0 and details["n"] == 2


@pytest.mark.parametrize(
    "judge, message",
    [
        ({"base_url": "http://x/v1", "model": "m", "model_path": "/m"}, "exactly one of base_url .* it has both"),
        ({"api_key_env": "K"}, "exactly one of base_url .* it has neither"),
        ({"model_path": "/nowhere/judge"}, "judge.model_path: /nowhere/judge is not a model directory"),
        ({"model_path": "/m", "api_key_env": "K"}, "the task option judge: api_key_env: unknown key"),
        ("gpt-4", "must be a mapping"),
    ],
)
def test_judge_option_errors_are_one_line(judge, message):
    with pytest.raises(JudgeError, match=message) as e:
        judge_client(judge, Engine(CPU_SETTINGS))
    assert "\n" not in str(e.value)


def test_a_local_judges_max_tokens_overrides_the_protocols(tiny_model, monkeypatch):
    judge = judge_client({"model_path": str(tiny_model), "max_tokens": 2}, vllm_engine(monkeypatch, lambda p: "x"))
    judge.chat_many([[{"role": "user", "content": "hi"}]], max_tokens=8)
    assert judged_calls()[-1][2]["max_tokens"] == 2
