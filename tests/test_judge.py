"""The judge client and the local OpenAI-compatible server, over real HTTP on loopback, and the offline judge task.

`stub_llm` (a real HTTP server standing in for a remote LLM API) serves the task tests too.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import ThreadingHTTPServer
from pathlib import Path
from urllib.request import Request, urlopen

import pytest

from a2rl.drivers.chatserver import serve_local_model
from a2rl.grading.evaluate import evaluate_model
from a2rl.httpjson import JSONRequestHandler, running
from a2rl.llm.chat import chat_prompt
from a2rl.llm.inference import Generator
from a2rl.llm.judge import ChatClient, JudgeError
from a2rl.spec.tasks import get_task
from a2rl.tasklib.prepare import ensure_prepared
from a2rl.weights import weights_hash

Reply = Callable[[dict, dict], tuple[int, dict]]  # (request body, headers) -> (status, response body)


def completion(text: str, *, top: list[tuple[str, float]] | None = None, model: str = "stub-judge-2024-01-01") -> dict:
    """An OpenAI chat.completion body."""
    choice: dict = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
    if top is not None:
        choice["logprobs"] = {
            "content": [
                {"token": text[:1], "logprob": 0.0, "top_logprobs": [{"token": t, "logprob": lp} for t, lp in top]}
            ]
        }
    return {
        "id": "x",
        "object": "chat.completion",
        "model": model,
        "system_fingerprint": "fp_stub",
        "choices": [choice],
    }


@contextmanager
def stub_llm(reply: Reply) -> Iterator[tuple[str, list[dict]]]:
    """A real HTTP server on loopback answering POST /v1/chat/completions with reply(); yields (base_url, log of
    {"body", "headers"} per request)."""
    seen: list[dict] = []

    class Handler(JSONRequestHandler):
        def do_POST(self) -> None:
            body = self.read_json()
            seen.append({"body": body, "headers": dict(self.headers)})
            self.send_json(*reply(body, dict(self.headers)))

    with running(ThreadingHTTPServer(("127.0.0.1", 0), Handler)) as root:
        yield root + "/v1", seen


HELLO = [{"role": "user", "content": "Name three colors."}]


# ---------------------------------------------------------------- client


def test_client_retries_a_server_error_then_succeeds() -> None:
    def reply(body: dict, headers: dict) -> tuple[int, dict]:
        return (500, {"error": {"message": "overloaded"}}) if len(seen) == 1 else (200, completion("B"))

    with stub_llm(reply) as (url, seen):
        client = ChatClient(url, "judge", retries=3, backoff_s=0.01)
        done = client.chat(HELLO, max_tokens=1)
    assert done.text == "B" and len(seen) == 2
    assert seen[1]["body"]["temperature"] == 0 and seen[1]["body"]["model"] == "judge"
    assert client.describe()["version"] == "stub-judge-2024-01-01" and client.describe()["requests"] == 1


def test_client_gives_up_after_its_retries_and_never_retries_a_client_error() -> None:
    with stub_llm(lambda body, headers: (503, {})) as (url, seen):
        with pytest.raises(JudgeError, match="failed 3 times.*503"):
            ChatClient(url, "judge", retries=2, backoff_s=0.01).chat(HELLO, max_tokens=1)
        assert len(seen) == 3
    with stub_llm(lambda body, headers: (400, {"error": {"message": "bad model"}})) as (url, seen):
        with pytest.raises(JudgeError, match="400.*bad model"):
            ChatClient(url, "judge", retries=2, backoff_s=0.01).chat(HELLO, max_tokens=1)
        assert len(seen) == 1


def test_client_sends_the_key_from_the_named_variable_and_never_shows_it(monkeypatch) -> None:
    def reply(body: dict, headers: dict) -> tuple[int, dict]:
        ok = headers.get("Authorization") == "Bearer s3cret-key"
        return (200, completion("A")) if ok else (401, {"error": {"message": "no key"}})

    with stub_llm(reply) as (url, seen):
        options = {"base_url": url, "model": "judge", "api_key_env": "A2RL_TEST_JUDGE_KEY", "retries": 0}
        monkeypatch.delenv("A2RL_TEST_JUDGE_KEY", raising=False)
        with pytest.raises(JudgeError, match="A2RL_TEST_JUDGE_KEY"):
            ChatClient.from_options(options)
        monkeypatch.setenv("A2RL_TEST_JUDGE_KEY", "s3cret-key")
        client = ChatClient.from_options(options)
        assert client.chat(HELLO, max_tokens=1).text == "A"
        monkeypatch.setenv("A2RL_TEST_JUDGE_KEY", "wrong")
        with pytest.raises(JudgeError, match="401") as failure:
            ChatClient.from_options(options).chat(HELLO, max_tokens=1)
    assert "s3cret" not in repr(client) + json.dumps(client.describe()) and "wrong" not in str(failure.value)
    with pytest.raises(Exception, match="unknown_option"):  # a typo in the options is an error, not ignored
        ChatClient.from_options({**options, "unknown_option": 1})


# ---------------------------------------------------------------- local server


def test_local_server_serves_the_model_over_real_http(tiny_model: Path) -> None:
    generator = Generator.load(tiny_model)
    expected = generator.generate([chat_prompt(generator.tokenizer, HELLO)], max_new_tokens=6, stop=None)[0]
    with serve_local_model(tiny_model, api_key="k") as url:
        assert url.startswith("http://127.0.0.1:")
        with urlopen(Request(f"{url}/models", headers={"Authorization": "Bearer k"}), timeout=10) as r:
            assert [m["id"] for m in json.load(r)["data"]] == ["tiny-llama"]
        client = ChatClient(url, "tiny-llama", api_key="k", retries=0)
        first = client.chat(HELLO, max_tokens=6, top_logprobs=5)
        again = client.chat(HELLO, max_tokens=6, top_logprobs=5)
        # A raw request: the OpenAI response shape, and the stop string honoured.
        body = json.dumps({"model": "tiny-llama", "messages": HELLO, "max_tokens": 6, "stop": ["\n\n"]}).encode()
        with urlopen(
            Request(f"{url}/chat/completions", data=body, headers={"Authorization": "Bearer k"}), timeout=10
        ) as r:
            raw = json.load(r)
        with pytest.raises(JudgeError, match="401"):
            ChatClient(url, "tiny-llama", retries=0).chat(HELLO, max_tokens=1)
        with pytest.raises(JudgeError, match="400.*top_logprobs"):
            client.chat(HELLO, max_tokens=1, top_logprobs=21)
    # Greedy decoding with the model's chat template: the same text as the grader's own generation.
    assert first.text == expected and again == first
    assert len(first.first_token_logprobs) == 5
    assert first.model == "tiny-llama" and first.system_fingerprint == "wh-" + weights_hash(tiny_model)[:16]
    message, usage = raw["choices"][0]["message"], raw["usage"]
    assert message["role"] == "assistant" and "\n\n" not in message["content"]
    assert raw["choices"][0]["finish_reason"] in ("stop", "length") and 0 < usage["completion_tokens"] <= 6


# ---------------------------------------------------------------- the offline judge task


@pytest.mark.slow  # > 5 s: the tiny model end to end
def test_localjudge_scores_end_to_end_with_a_local_judge(tiny_model: Path, tmp_path: Path) -> None:
    task = get_task("localjudge")
    ensure_prepared(task, tmp_path)
    runs = []
    for _ in range(2):
        t0 = time.monotonic()
        runs.append(evaluate_model(task, tiny_model, tiny_model, data_root=tmp_path, options={"max_new_tokens": 16}))
        print(f"localjudge on the tiny model: {time.monotonic() - t0:.1f} s")
    (score, details), (score_again, details_again) = runs
    assert 0 <= score <= 100 and score == score_again and details == details_again
    judge = details["judge"]
    assert judge["model"] == "tiny-llama" and judge["version"] == "tiny-llama"
    assert judge["system_fingerprint"] == "wh-" + weights_hash(tiny_model)[:16]
    assert details["n_total"] == 200 and judge["requests"] == 400  # every answer judged in both orders
