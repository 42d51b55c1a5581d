"""The `vllm` local-driver backend behind our protocol server: every protocol's request reaches vLLM's
`/v1/completions` as the prompt rendered on the chat template (token ids, fitted to the context), with the
request's output cap, greedy; vLLM's text comes back in the protocol, a Hermes tool call as that protocol's tool
call, a malformed one as the same 422 as the transformers backend gives. vLLM cannot be installed here: it is
played by a STAND-IN of its HTTP API (fakes.RecordingVLLMServer)."""

from __future__ import annotations

import json

import pytest

from a2rl.drivers import protocols, toolcalls, wire_replies, wire_requests
from a2rl.drivers.chatserver import serve
from a2rl.drivers.vllmclient import VLLMChatModel
from fakes import RecordingVLLMServer
from test_local_driver_protocols import CASES, _post

CALL = '<tool_call>{"name": "run", "arguments": {"command": "ls"}}</tool_call>'
RUN_SCHEMA = {"type": "object", "properties": {"command": {"type": "string"}}}
TOOL_CASES = {  # protocol: (path, body offering tool `run`, key header, the reply's tool calls as (name, args))
    "anthropic": (
        "/v1/messages",
        {
            "model": "x",
            "max_tokens": 8,
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"name": "run", "input_schema": RUN_SCHEMA}],
        },
        lambda k: {"x-api-key": k},
        lambda d: [(b["name"], b["input"]) for b in d["content"] if b["type"] == "tool_use"],
    ),
    "responses": (
        "/v1/responses",
        {
            "model": "x",
            "input": "hi",
            "max_output_tokens": 8,
            "tools": [{"type": "function", "name": "run", "parameters": RUN_SCHEMA}],
        },
        lambda k: {"Authorization": f"Bearer {k}"},
        lambda d: [(o["name"], json.loads(o["arguments"])) for o in d["output"] if o["type"] == "function_call"],
    ),
    "chat": (
        "/v1/chat/completions",
        {
            "model": "x",
            "max_tokens": 8,
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {"name": "run", "parameters": RUN_SCHEMA}}],
        },
        lambda k: {"Authorization": f"Bearer {k}"},
        lambda d: [
            (c["function"]["name"], json.loads(c["function"]["arguments"]))
            for c in d["choices"][0]["message"]["tool_calls"]
        ],
    ),
    "gemini": (
        "/v1beta/models/x:generateContent",
        {
            "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
            "generationConfig": {"maxOutputTokens": 8},
            "tools": [{"functionDeclarations": [{"name": "run", "parametersJsonSchema": RUN_SCHEMA}]}],
        },
        lambda k: {"x-goog-api-key": k},
        lambda d: [
            (p["functionCall"]["name"], p["functionCall"]["args"])
            for p in d["candidates"][0]["content"]["parts"]
            if "functionCall" in p
        ],
    ),
}


@pytest.fixture
def vllm_driver(tiny_model):
    """Our server (key "k") in front of the stand-in (its own key "vk"), as server.py runs the vllm backend;
    the stand-in's replies are set through `vllm.reply`."""
    with RecordingVLLMServer("vk") as vllm:
        backend = VLLMChatModel(tiny_model, vllm.url, "tiny", "vk", fit_prompt=True, max_output=6)
        with serve(backend, api_key="k") as url:
            yield url.removesuffix("/v1"), vllm, backend


@pytest.mark.parametrize("protocol", sorted(CASES))
def test_every_protocol_reaches_vllm_as_the_chat_template_prompt(vllm_driver, protocol):
    root, vllm, backend = vllm_driver
    path, body, key = CASES[protocol]
    status, data = _post(root + path, body, key("k"))
    assert status == 200, data
    [sent] = vllm.requests
    req = wire_requests.parse_request(protocols.route("POST", path), body)
    tok = backend.tokenizer
    ids = tok(toolcalls.chat_prompt(tok, req), add_special_tokens=False)["input_ids"]
    # the rendered prompt, its end kept where it exceeds the tiny model's 512 positions (anthropic's does),
    # leaving room for the output
    assert sent["prompt"] == (ids if len(ids) < 512 else ids[-(512 - 6) :]), tok.decode(sent["prompt"])
    assert len(ids) >= 512 if protocol == "anthropic" else len(ids) < 512
    assert tok.decode(sent["prompt"]).endswith("<|assistant|>\n")
    # the request asked for 8 tokens; the server caps driver requests at 6
    assert sent["max_tokens"] == 6 and sent["stop"] == [] and sent["temperature"] == 0.0 and sent["model"] == "tiny"
    events = [d for _, d in protocols.sse_events(data) if d != "[DONE]"]
    text = {
        "anthropic": lambda: events[2]["delta"]["text"],
        "responses": lambda: events[-1]["response"]["output"][0]["content"][0]["text"],
        "chat": lambda: events[0]["choices"][0]["delta"]["content"],
        "gemini": lambda: events[-1]["candidates"][0]["content"]["parts"][0]["text"],
    }[protocol]()
    assert text == "ok"
    # our key check stays in front of vLLM: a wrong key never reaches it
    assert _post(root + path, body, key("wrong"))[0] == 401 and len(vllm.requests) == 1


@pytest.mark.parametrize("protocol", sorted(TOOL_CASES))
def test_a_tool_call_in_vllms_text_is_the_protocols_tool_call(vllm_driver, protocol):
    root, vllm, backend = vllm_driver
    path, body, key, calls = TOOL_CASES[protocol]
    vllm.reply = lambda ids: f"Listing.\n{CALL}"
    status, data = _post(root + path, body, key("k"))
    assert status == 200, data
    assert calls(json.loads(data)) == [("run", {"command": "ls"})]
    assert '"name": "run"' in backend.tokenizer.decode(vllm.requests[-1]["prompt"])  # offered in the prompt


@pytest.mark.parametrize("protocol", sorted(TOOL_CASES))
def test_a_malformed_tool_call_from_vllm_is_a_422(vllm_driver, protocol):
    root, vllm, _ = vllm_driver
    path, body, key, _ = TOOL_CASES[protocol]
    vllm.reply = lambda ids: '<tool_call>{"name": "run", "arguments": {oops}</tool_call>'
    status, data = _post(root + path, body, key("k"))
    doc = json.loads(data)
    message = doc["error"]["message"]
    assert status == 422 and message.startswith("malformed tool call: the model wrote a tool call that is not JSON")
    assert doc == json.loads(wire_replies.render_error(protocol, 422, message).chunks[0])  # the protocol's own form
    vllm.reply = lambda ids: "fine"  # and the server still answers
    assert _post(root + path, body, key("k"))[0] == 200


def test_plain_chat_completions_keep_stop_strings_and_logprobs(vllm_driver):
    """The judge-style request (no tools, not streamed): its stop strings and output cap reach vLLM, its
    logprobs come back in the chat completions form."""
    root, vllm, _ = vllm_driver
    vllm.reply = lambda ids: "yes no"
    status, data = _post(
        root + "/v1/chat/completions",
        {
            "model": "x",
            "max_tokens": 3,
            "stop": ["\n"],
            "logprobs": True,
            "top_logprobs": 2,
            "messages": [{"role": "user", "content": "ok?"}],
        },
        {"Authorization": "Bearer k"},
    )
    assert status == 200, data
    sent = vllm.requests[-1]
    assert sent["max_tokens"] == 3 and sent["stop"] == ["\n"] and sent["logprobs"] == 2
    doc = json.loads(data)
    choice = doc["choices"][0]
    assert choice["message"]["content"] == "yes no" and doc["system_fingerprint"].startswith("wh-")
    assert choice["logprobs"]["content"][0] == {
        "token": "yes",
        "logprob": -0.5,
        "top_logprobs": [{"token": "yes", "logprob": -0.5}, {"token": "other", "logprob": -1.5}],
    }
    assert doc["usage"]["completion_tokens"] == 2


def test_vllm_failing_is_a_server_error_not_a_crash(tiny_model):
    """vLLM refusing our server (here: a wrong key of its own) is a 500 naming it, and our server goes on."""
    with RecordingVLLMServer("vk") as vllm:
        with serve(VLLMChatModel(tiny_model, vllm.url, "tiny", "not-vk"), api_key="k") as url:
            path, body, key = CASES["anthropic"]
            status, data = _post(url.removesuffix("/v1") + path, {**body, "system": "s"}, key("k"))
            assert status == 500 and "vLLM answered 401" in json.loads(data)["error"]["message"], data
            assert not vllm.requests


def test_the_driver_server_puts_our_protocols_in_front_of_a_private_vllm(tiny_model, tmp_path, monkeypatch):
    """server.py's vllm backend, with the stand-in run as vLLM's process: vLLM listens on loopback with a key
    of its own (from its environment, not argv), our server is the one yielded (advertised), and an Anthropic
    request reaches vLLM as token ids and comes back as a message."""
    from a2rl.drivers.server import _serve
    from a2rl.spec.sweep import LocalDriver
    from conftest import FIXTURES

    record = str(tmp_path / "vllm-")
    monkeypatch.setenv("PYTHONPATH", str(FIXTURES / "vllm_standin"))
    monkeypatch.setenv("STANDIN_VLLM_RECORD", record)
    spec = LocalDriver(model=str(tiny_model), backend="vllm", args={"max_model_len": 256}, startup_timeout_s=120)
    with _serve(spec, tiny_model, "tiny", "k", "127.0.0.1", tmp_path / "server.log") as port:
        argv = json.loads(open(record + "argv.json").read())
        assert argv[argv.index("--host") + 1] == "127.0.0.1" and int(argv[argv.index("--port") + 1]) != port
        assert "--api-key" not in argv and argv[argv.index("--max-model-len") + 1] == "256"
        path, body, key = CASES["anthropic"]
        status, data = _post(f"http://127.0.0.1:{port}{path}", body, key("k"))
        assert status == 200, data
        assert [e for _, e in protocols.sse_events(data)][2]["delta"]["text"] == "ok"
        [sent] = [json.loads(line) for line in open(record + "requests.jsonl")]
        # fitted to max_model_len (256), not the model config's 512 positions
        assert len(sent["prompt"]) == 256 - 8 and sent["model"] == "tiny"


def test_requests_reach_vllm_concurrently(vllm_driver):
    """vLLM batches what it gets at once: our server does not hold one agent's request behind another's (the
    transformers backend does, its model being single-threaded). The stand-in answers only once both requests
    are inside it (the barrier's limit only ends a hung test)."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    root, vllm, _ = vllm_driver
    both_in = threading.Barrier(2, timeout=120)
    vllm.reply = lambda ids: f"in {both_in.wait()}"
    path, body, key = CASES["chat"]
    with ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(lambda _: _post(root + path, body, key("k")), range(2)))
    assert [status for status, _ in answers] == [200, 200], answers
