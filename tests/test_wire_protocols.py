"""a2rl.drivers.protocols: each vendor's request parsed into neutral form (text, tool calls, tool results, tools)
and a neutral reply rendered as that vendor's response, streamed and not."""

from __future__ import annotations

import json

import pytest

from a2rl.drivers.protocols import ProtocolError, Reply, ToolCall, ToolResult, Usage, route, sse_events
from a2rl.drivers.wire_replies import render, render_error
from a2rl.drivers.wire_requests import parse_request

REPLY = Reply("On it.", [ToolCall("call_1", "bash", {"command": "ls code"})], Usage(100, 20, 30))


def body(rendered) -> dict:
    assert not rendered.stream
    return json.loads(b"".join(rendered.chunks))


def events(rendered) -> list:
    assert rendered.stream and rendered.content_type == "text/event-stream"
    return list(sse_events(b"".join(rendered.chunks)))


def test_routes():
    assert route("POST", "/v1/messages?beta=true").protocol == "anthropic"
    assert route("POST", "/v1/responses").protocol == "responses"
    assert route("POST", "/v1/chat/completions").protocol == "chat"
    g = route("POST", "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse")
    assert (g.protocol, g.model, g.stream, g.sse) == ("gemini", "gemini-2.5-flash", True, True)
    g = route("POST", "/v1beta/models/m:generateContent")
    assert (g.model, g.stream) == ("m", False)
    assert route("GET", "/v1/messages") is None and route("POST", "/v1/other") is None


def test_anthropic_request_and_stream():
    r = route("POST", "/v1/messages?beta=true")
    req = parse_request(
        r,
        {
            "model": "claude-x",
            "stream": True,
            "max_tokens": 64,
            "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
            "tools": [{"name": "Bash", "description": "run", "input_schema": {"type": "object"}}],
            "messages": [
                {"role": "user", "content": "hi"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "x"},
                        {"type": "text", "text": "ok"},
                        {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}},
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "t1",
                            "is_error": True,
                            "content": [{"type": "text", "text": "boom"}],
                        }
                    ],
                },
            ],
        },
    )
    assert [(m.role, m.text) for m in req.messages] == [
        ("system", "Be brief."),
        ("user", "hi"),
        ("assistant", "ok"),
        ("tool", ""),
    ]
    assert req.messages[2].tool_calls == [ToolCall("t1", "Bash", {"command": "ls"})]
    assert req.messages[3].tool_results == [ToolResult("t1", "boom", is_error=True)]
    assert (req.tools[0].name, req.stream, req.max_tokens) == ("Bash", True, 64)
    ev = events(render(req, REPLY))
    names = [e for e, _ in ev]
    assert names == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert all(d["type"] == e for e, d in ev)
    assert ev[0][1]["message"]["usage"] == {
        "input_tokens": 70,
        "output_tokens": 0,
        "cache_read_input_tokens": 30,
        "cache_creation_input_tokens": 0,
    }
    assert ev[2][1]["delta"] == {"type": "text_delta", "text": "On it."}
    assert ev[4][1]["content_block"] == {"type": "tool_use", "id": "call_1", "name": "bash", "input": {}}
    assert json.loads(ev[5][1]["delta"]["partial_json"]) == {"command": "ls code"}
    assert ev[7][1]["delta"]["stop_reason"] == "tool_use" and ev[7][1]["usage"] == {"output_tokens": 20}
    req.stream = False
    doc = body(render(req, Reply("done")))
    assert (doc["type"], doc["stop_reason"], doc["content"]) == (
        "message",
        "end_turn",
        [{"type": "text", "text": "done"}],
    )


def test_responses_request_and_stream():
    req = parse_request(
        route("POST", "/v1/responses"),
        {
            "model": "gpt-x",
            "instructions": "sys",
            "stream": True,
            "tools": [
                {"type": "function", "name": "shell", "parameters": {"type": "object"}},
                {"type": "custom", "name": "apply_patch", "format": {"type": "grammar"}},
                {"type": "web_search"},
            ],
            "input": [
                {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "dev"}]},
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
                {"type": "reasoning", "summary": []},
                {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": '{"command": ["ls"]}'},
                {"type": "function_call_output", "call_id": "c1", "output": "a b"},
            ],
        },
    )
    assert [(m.role, m.text) for m in req.messages] == [
        ("system", "sys"),
        ("system", "dev"),
        ("user", "go"),
        ("assistant", ""),
        ("tool", ""),
    ]
    assert req.messages[3].tool_calls == [ToolCall("c1", "shell", {"command": ["ls"]})]
    assert req.messages[4].tool_results == [ToolResult("c1", "a b")]
    assert [(t.name, t.kind) for t in req.tools] == [("shell", "function"), ("apply_patch", "custom")]
    reply = Reply(
        "x",
        [ToolCall("c2", "shell", {"command": ["pwd"]}), ToolCall("c3", "apply_patch", {"input": "*** Begin Patch"})],
        Usage(10, 5, 2),
    )
    ev = events(render(req, reply))
    assert [d["sequence_number"] for _, d in ev] == list(range(len(ev)))
    assert ev[0][0] == "response.created" and ev[-1][0] == "response.completed"
    done = [d["item"] for e, d in ev if e == "response.output_item.done"]
    assert [i["type"] for i in done] == ["message", "function_call", "custom_tool_call"]
    assert json.loads(done[1]["arguments"]) == {"command": ["pwd"]} and done[1]["call_id"] == "c2"
    assert done[2]["input"] == "*** Begin Patch"
    final = ev[-1][1]["response"]
    assert final["output"] == done and final["usage"]["input_tokens_details"] == {"cached_tokens": 2}
    assert any(e == "response.output_text.delta" and d["delta"] == "x" for e, d in ev)
    req.stream = False
    assert body(render(req, reply))["status"] == "completed"


def test_chat_request_stream_and_not():
    req = parse_request(
        route("POST", "/v1/chat/completions"),
        {
            "model": "m",
            "stream": True,
            "tools": [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}],
            "messages": [
                {"role": "system", "content": "s"},
                {"role": "user", "content": [{"type": "text", "text": "u"}]},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "not json"}}
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "content": "out"},
            ],
        },
    )
    assert [(m.role, m.text) for m in req.messages] == [("system", "s"), ("user", "u"), ("assistant", ""), ("tool", "")]
    assert req.messages[2].tool_calls[0].arguments == {"_raw": "not json"}
    assert req.messages[3].tool_results == [ToolResult("c1", "out")]
    ev = [d for _, d in events(render(req, REPLY))]
    assert ev[-1] == "[DONE]" and ev[-2]["choices"] == [] and ev[-2]["usage"]["prompt_tokens"] == 100
    assert ev[0]["choices"][0]["delta"] == {"role": "assistant", "content": "On it."}
    call = ev[1]["choices"][0]["delta"]["tool_calls"][0]
    assert (call["index"], call["id"], json.loads(call["function"]["arguments"])) == (
        0,
        "call_1",
        {"command": "ls code"},
    )
    assert ev[2]["choices"][0]["finish_reason"] == "tool_calls"
    req.stream = False
    doc = body(render(req, REPLY))
    assert doc["choices"][0]["finish_reason"] == "tool_calls"
    assert doc["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "bash"


def test_gemini_request_and_stream():
    r = route("POST", "/v1beta/models/gemini-x:streamGenerateContent?alt=sse")
    req = parse_request(
        r,
        {
            "systemInstruction": {"parts": [{"text": "sys"}]},
            "tools": [
                {"functionDeclarations": [{"name": "run_shell_command", "parametersJsonSchema": {"type": "object"}}]}
            ],
            "contents": [
                {"role": "user", "parts": [{"text": "go"}]},
                {
                    "role": "model",
                    "parts": [
                        {"text": "thinking", "thought": True},
                        {"functionCall": {"name": "run_shell_command", "args": {"command": "ls"}}},
                    ],
                },
                {
                    "role": "user",
                    "parts": [{"functionResponse": {"name": "run_shell_command", "response": {"output": "a"}}}],
                },
            ],
        },
    )
    assert (req.model, req.stream) == ("gemini-x", True)
    assert [(m.role, m.text) for m in req.messages] == [
        ("system", "sys"),
        ("user", "go"),
        ("assistant", ""),
        ("tool", ""),
    ]
    assert req.messages[2].tool_calls == [ToolCall("run_shell_command", "run_shell_command", {"command": "ls"})]
    assert req.messages[3].tool_results == [ToolResult("run_shell_command", "a", name="run_shell_command")]
    ((_, doc),) = events(render(req, REPLY))
    parts = doc["candidates"][0]["content"]["parts"]
    assert parts[0] == {"text": "On it."} and parts[1]["functionCall"]["args"] == {"command": "ls code"}
    assert doc["usageMetadata"]["promptTokenCount"] == 100
    req.sse = False  # streamGenerateContent without alt=sse: a JSON array
    assert json.loads(b"".join(render(req, REPLY).chunks))[0]["candidates"]
    req.stream = False
    assert body(render(req, REPLY))["candidates"][0]["finishReason"] == "STOP"


def test_bad_requests_are_protocol_errors():
    with pytest.raises(ProtocolError, match="the body must be a JSON object"):
        parse_request(route("POST", "/v1/messages"), [])
    with pytest.raises(ProtocolError, match="messages\\[0\\].role"):
        parse_request(route("POST", "/v1/messages"), {"messages": [{"role": "tool", "content": "x"}]})
    with pytest.raises(ProtocolError, match="'input' must be a list"):
        parse_request(route("POST", "/v1/responses"), {"input": 3})


def test_errors_in_each_protocols_shape():
    assert body(render_error("anthropic", 400, "bad"))["error"] == {"type": "invalid_request_error", "message": "bad"}
    assert body(render_error("gemini", 500, "x"))["error"]["status"] == "INTERNAL"
    assert body(render_error("chat", 400, "bad"))["error"]["message"] == "bad"
    assert render_error("responses", 500, "x").status == 500
