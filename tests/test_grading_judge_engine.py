"""localjudge's judge model runs on the grader's engine, on its backend. vLLM is driven through RecordingVLLM, a
STAND-IN for vllm.LLM (tests/fakes.py): it proves our plumbing (the judge shares the one engine, asks for
first-token logprobs), not vLLM. The transformers backend's first-token logprobs are checked on the real tiny
model."""

from __future__ import annotations

import pytest
import torch

from a2rl.grading.evaluate import evaluate_model
from a2rl.llm import vllm_backend
from a2rl.llm.backends import BackendSettings, Engine
from a2rl.llm.inference import Generator
from a2rl.spec.generation import get_preset
from a2rl.spec.tasks import get_task
from a2rl.tasklib.prepare import ensure_prepared
from a2rl.weights import weights_hash
from fakes import RecordingSamplingParams, RecordingVLLM


def policy_wins(prompt: str) -> str:
    """Policy prompts get "POLICY"; the judge (its prompts hold "# Instruction") prefers whichever response it is."""
    if "# Instruction" not in prompt:
        return "POLICY"
    return "A" if "# Response A\nPOLICY" in prompt else "B"


@pytest.fixture
def judge_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    ensure_prepared(get_task("localjudge"), root)
    return root


def test_localjudge_judges_on_the_vllm_engine(tiny_model, judge_data, monkeypatch):
    monkeypatch.setattr(RecordingVLLM, "instances", [])
    monkeypatch.setattr(
        vllm_backend, "vllm_api", lambda: (lambda **kw: RecordingVLLM(reply=policy_wins, **kw), RecordingSamplingParams)
    )
    engine = Engine(BackendSettings("vllm", "cuda", 1, 0.9, None, None))
    score, details = evaluate_model(
        get_task("localjudge"),
        tiny_model,
        tiny_model,
        data_root=judge_data,
        engine=engine,
        options={"judge_model": str(tiny_model)},
    )
    assert score == 100.0 and details["unparsed_verdicts"] == 0
    assert details["judge"] | {"model_path": None} == {
        "model": "tiny-llama",
        "version": "tiny-llama",
        "system_fingerprint": "wh-" + weights_hash(tiny_model)[:16],
        "model_path": None,
        "backend": "vllm",
        "requests": 400,
    }
    # one engine: the judge (same architecture as the policy) is a weights reload, not a second vllm.LLM
    (llm,) = RecordingVLLM.instances
    assert (engine.starts, engine.reloads) == (1, 1)
    judged = [c for c in llm.calls if c[0] == "generate" and "logprobs" in c[2]]
    assert len(judged) == 1 and judged[0][2] == {"max_tokens": 1, "temperature": 0.0, "logprobs": 20}
    assert len(judged[0][1]) == 400


def test_transformers_first_token_logprobs_match_an_unpadded_forward(tiny_model):
    gen = Generator.load(tiny_model, device="cpu", preset=get_preset())
    prompts = ["Question: 1 + 2 =\nAnswer:", "Question: Tom has 3 apples and buys 4 more. How many?\nAnswer:"]
    batched = gen.first_token_logprobs(prompts, top=5)
    for prompt, got in zip(prompts, batched):
        with torch.no_grad():
            logits = gen.model(**gen.tokenizer(prompt, return_tensors="pt")).logits[0, -1]
        want = logits.float().log_softmax(-1).topk(5)
        assert [t for t, _ in got] == [gen.tokenizer.decode([i]) for i in want.indices.tolist()]
        assert [v for _, v in got] == pytest.approx(want.values.tolist(), abs=1e-4)
        assert got[0][0] == gen.generate([prompt], max_new_tokens=1, stop=None)[0]  # best first: greedy's token
