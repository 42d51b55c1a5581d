"""The LLM vendors' wire protocols, translated to and from one neutral form, so one model backend (the local
driver server, the tests' scripted model) can answer every agent CLI in the protocol it speaks:

- `anthropic`: Anthropic Messages, `POST /v1/messages` (Claude Code), SSE events when `stream` is set;
- `responses`: OpenAI Responses, `POST /v1/responses` (Codex), SSE events when `stream` is set;
- `chat`: OpenAI Chat Completions, `POST /v1/chat/completions` (OpenCode, litellm-based stacks), SSE chunks
  ending in `data: [DONE]` when `stream` is set;
- `gemini`: Gemini `POST /v1beta/models/<model>:generateContent` and `:streamGenerateContent` (Gemini CLI;
  SSE with `?alt=sse`, else one JSON array).

`route` maps a request line to a protocol, `parse_request` turns its body into a neutral `Request`, and
`render` turns a neutral `Reply` into that protocol's response (streaming or not); `render_error` gives the
protocol's error document, so a client sees a refused request as an API error rather than a broken stream.
Real clients of each (tests/test_real_clis.py, through tests/scripted_server.py): claude 2.1.197 (anthropic),
codex 0.169.0 and opencode 1.18.33 (responses), opencode with an OpenAI-compatible provider (chat), gemini
0.61.0 (gemini).
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import parse_qs, urlsplit

WireProtocol = Literal["anthropic", "responses", "chat", "gemini"]
PROTOCOLS: tuple[WireProtocol, ...] = ("anthropic", "responses", "chat", "gemini")


class ProtocolError(ValueError):
    """A request body that does not follow its protocol (HTTP 400)."""


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]


@dataclass
class ToolResult:
    call_id: str
    content: str
    name: str = ""  # Gemini pairs results with calls by name
    is_error: bool = False


@dataclass
class Message:
    role: Literal["system", "user", "assistant", "tool"]
    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)  # assistant
    tool_results: list[ToolResult] = field(default_factory=list)  # tool


@dataclass
class Tool:
    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)  # JSON schema of the arguments
    kind: Literal["function", "custom"] = "function"  # custom: Responses free-form tools, one `input` string


@dataclass
class Request:
    protocol: WireProtocol
    model: str
    messages: list[Message]
    tools: list[Tool] = field(default_factory=list)
    stream: bool = False
    max_tokens: int | None = None
    sse: bool = True  # Gemini streams without ?alt=sse as one JSON array

    def tool(self, name: str) -> Tool | None:
        return next((t for t in self.tools if t.name == name), None)


@dataclass
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0


@dataclass
class Reply:
    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)


@dataclass
class Route:
    protocol: WireProtocol
    model: str | None = None  # Gemini names the model in the path
    stream: bool = False
    sse: bool = True


@dataclass
class Rendered:
    """A response: one JSON body, or (stream) chunks to write and flush one by one."""

    status: int
    content_type: str
    chunks: list[bytes]
    stream: bool


def new_id(prefix: str) -> str:
    return f"{prefix}{secrets.token_hex(12)}"


def route(method: str, path: str) -> Route | None:
    """The protocol of a request line; None where no protocol has such an endpoint."""
    if method != "POST":
        return None
    parts = urlsplit(path)
    p = parts.path.rstrip("/")
    if p == "/v1/messages":
        return Route("anthropic")
    if p == "/v1/responses":
        return Route("responses")
    if p == "/v1/chat/completions":
        return Route("chat")
    for prefix in ("/v1beta/models/", "/v1/models/"):
        if p.startswith(prefix) and ":" in p:
            model, _, verb = p[len(prefix) :].rpartition(":")
            if verb in ("generateContent", "streamGenerateContent"):
                sse = parse_qs(parts.query).get("alt") == ["sse"]
                return Route("gemini", model=model, stream=verb == "streamGenerateContent", sse=sse)
    return None


# ---- requests ------------------------------------------------------------------------------------------------


def _obj(x: Any, what: str) -> dict[str, Any]:
    if not isinstance(x, dict):
        raise ProtocolError(f"{what} must be a JSON object")
    return x


def _list(x: Any, what: str) -> list[Any]:
    if x is None:
        return []
    if not isinstance(x, list):
        raise ProtocolError(f"{what} must be a list")
    return x


def _args(raw: Any) -> dict[str, Any]:
    """Tool-call arguments as a dict, from a JSON string (OpenAI) or an object; unparsable ones stay visible."""
    if isinstance(raw, dict):
        return raw
    if raw in (None, ""):
        return {}
    try:
        value = json.loads(raw)
    except (TypeError, ValueError):
        return {"_raw": str(raw)}
    return value if isinstance(value, dict) else {"_raw": str(raw)}


def _text(content: Any) -> str:
    """The text of a content field: a string, or a list of parts with `text`."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text") or "" for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def _append_call(messages: list[Message], call: ToolCall) -> None:
    if messages and messages[-1].role == "assistant":
        messages[-1].tool_calls.append(call)
    else:
        messages.append(Message("assistant", tool_calls=[call]))


def _append_result(messages: list[Message], result: ToolResult) -> None:
    if messages and messages[-1].role == "tool":
        messages[-1].tool_results.append(result)
    else:
        messages.append(Message("tool", tool_results=[result]))


def _anthropic(body: dict[str, Any]) -> Request:
    messages = [Message("system", _text(body["system"]))] if body.get("system") else []
    for i, m in enumerate(_list(body.get("messages"), "'messages'")):
        m = _obj(m, f"messages[{i}]")
        role = m.get("role")
        if role not in ("user", "assistant", "system"):  # Claude Code 2.1 sends system reminders as messages
            raise ProtocolError(f"messages[{i}].role must be 'user', 'assistant' or 'system'")
        content = m.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else _list(content, "content")
        texts: list[str] = []
        for b in blocks:
            b = _obj(b, f"messages[{i}].content[]")
            kind = b.get("type")
            if kind == "text":
                texts.append(str(b.get("text") or ""))
            elif kind == "tool_use":
                _append_call(messages, ToolCall(str(b.get("id")), str(b.get("name")), _args(b.get("input"))))
            elif kind == "tool_result":
                _append_result(
                    messages,
                    ToolResult(str(b.get("tool_use_id")), _text(b.get("content")), is_error=bool(b.get("is_error"))),
                )
        if texts:  # thinking, images and documents carry nothing a text model reads
            if role == "assistant" and messages and messages[-1].role == "assistant" and not messages[-1].text:
                messages[-1].text = "".join(texts)
            else:
                messages.append(Message(role, "".join(texts)))
    tools = [
        Tool(t["name"], t.get("description") or "", t.get("input_schema") or {})
        for t in _list(body.get("tools"), "'tools'")
        if isinstance(t, dict) and "name" in t
    ]
    return Request(
        "anthropic", str(body.get("model") or ""), messages, tools, bool(body.get("stream")), body.get("max_tokens")
    )


def _responses(body: dict[str, Any]) -> Request:
    messages = [Message("system", body["instructions"])] if isinstance(body.get("instructions"), str) else []
    items = body.get("input")
    items = (
        [{"type": "message", "role": "user", "content": items}] if isinstance(items, str) else _list(items, "'input'")
    )
    for i, it in enumerate(items):
        it = _obj(it, f"input[{i}]")
        kind = it.get("type", "message")
        if kind == "message":
            role = {"developer": "system"}.get(it.get("role"), it.get("role"))
            if role not in ("system", "user", "assistant"):
                raise ProtocolError(f"input[{i}].role {it.get('role')!r} is not a message role")
            messages.append(Message(role, _text(it.get("content"))))
        elif kind == "function_call":
            _append_call(messages, ToolCall(str(it.get("call_id")), str(it.get("name")), _args(it.get("arguments"))))
        elif kind == "custom_tool_call":
            _append_call(
                messages, ToolCall(str(it.get("call_id")), str(it.get("name")), {"input": str(it.get("input") or "")})
            )
        elif kind in ("function_call_output", "custom_tool_call_output"):
            out = it.get("output")
            _append_result(
                messages,
                ToolResult(str(it.get("call_id")), out if isinstance(out, str) else _text(out) or json.dumps(out)),
            )
    tools = []
    for t in _list(body.get("tools"), "'tools'"):
        if isinstance(t, dict) and t.get("type") in ("function", "custom") and "name" in t:
            tools.append(Tool(t["name"], t.get("description") or "", t.get("parameters") or {}, t["type"]))
    return Request(
        "responses",
        str(body.get("model") or ""),
        messages,
        tools,
        bool(body.get("stream")),
        body.get("max_output_tokens"),
    )


def _chat(body: dict[str, Any]) -> Request:
    messages: list[Message] = []
    for i, m in enumerate(_list(body.get("messages"), "'messages'")):
        m = _obj(m, f"messages[{i}]")
        role = {"developer": "system"}.get(m.get("role"), m.get("role"))
        if role == "tool":
            _append_result(messages, ToolResult(str(m.get("tool_call_id")), _text(m.get("content"))))
            continue
        if role not in ("system", "user", "assistant"):
            raise ProtocolError(f"messages[{i}].role {m.get('role')!r} is not a chat role")
        calls = [
            ToolCall(
                str(c.get("id")),
                str((c.get("function") or {}).get("name")),
                _args((c.get("function") or {}).get("arguments")),
            )
            for c in _list(m.get("tool_calls"), "tool_calls")
            if isinstance(c, dict)
        ]
        messages.append(Message(role, _text(m.get("content")), tool_calls=calls))
    tools = [
        Tool(f["name"], f.get("description") or "", f.get("parameters") or {})
        for t in _list(body.get("tools"), "'tools'")
        if isinstance(t, dict) and isinstance(f := t.get("function"), dict) and "name" in f
    ]
    return Request(
        "chat",
        str(body.get("model") or ""),
        messages,
        tools,
        bool(body.get("stream")),
        body.get("max_completion_tokens") or body.get("max_tokens"),
    )


def _gemini(body: dict[str, Any], route: Route) -> Request:
    system = body.get("systemInstruction") or body.get("system_instruction")
    messages = (
        [Message("system", system if isinstance(system, str) else _text((system or {}).get("parts")))] if system else []
    )
    for i, c in enumerate(_list(body.get("contents"), "'contents'")):
        c = _obj(c, f"contents[{i}]")
        role = {"model": "assistant"}.get(c.get("role") or "user", c.get("role") or "user")
        if role not in ("user", "assistant"):
            raise ProtocolError(f"contents[{i}].role must be 'user' or 'model'")
        texts: list[str] = []
        for p in _list(c.get("parts"), f"contents[{i}].parts"):
            p = _obj(p, f"contents[{i}].parts[]")
            if isinstance(p.get("text"), str) and not p.get("thought"):
                texts.append(p["text"])
            elif isinstance(fc := p.get("functionCall"), dict):
                _append_call(
                    messages, ToolCall(str(fc.get("id") or fc.get("name")), str(fc.get("name")), _args(fc.get("args")))
                )
            elif isinstance(fr := p.get("functionResponse"), dict):
                resp = fr.get("response")
                out = resp.get("output", resp.get("error")) if isinstance(resp, dict) else resp
                _append_result(
                    messages,
                    ToolResult(
                        str(fr.get("id") or fr.get("name")),
                        out if isinstance(out, str) else json.dumps(out),
                        name=str(fr.get("name")),
                    ),
                )
        if texts:
            messages.append(Message(role, "".join(texts)))
    tools = []
    for t in _list(body.get("tools"), "'tools'"):
        for f in (t.get("functionDeclarations") or t.get("function_declarations") or []) if isinstance(t, dict) else []:
            if isinstance(f, dict) and "name" in f:
                tools.append(
                    Tool(
                        f["name"],
                        f.get("description") or "",
                        f.get("parametersJsonSchema") or f.get("parameters") or {},
                    )
                )
    config = body.get("generationConfig") or {}
    return Request(
        "gemini",
        route.model or "",
        messages,
        tools,
        route.stream,
        config.get("maxOutputTokens") if isinstance(config, dict) else None,
        route.sse,
    )


def parse_request(route: Route, body: Any) -> Request:
    """A request body of `route`'s protocol in neutral form; ProtocolError where it breaks the protocol."""
    body = _obj(body, "the body")
    if route.protocol == "gemini":
        return _gemini(body, route)
    return {"anthropic": _anthropic, "responses": _responses, "chat": _chat}[route.protocol](body)


# ---- replies -------------------------------------------------------------------------------------------------


def _sse(event: str | None, data: Any) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {data if isinstance(data, str) else json.dumps(data)}\n\n".encode()


def _json(status: int, doc: Any) -> Rendered:
    return Rendered(status, "application/json", [json.dumps(doc).encode()], False)


def _stream(chunks: list[bytes]) -> Rendered:
    return Rendered(200, "text/event-stream", chunks, True)


def _render_anthropic(req: Request, reply: Reply, model: str) -> Rendered:
    u = reply.usage
    usage = {
        "input_tokens": u.input_tokens - u.cached_input_tokens,
        "output_tokens": u.output_tokens,
        "cache_read_input_tokens": u.cached_input_tokens,
        "cache_creation_input_tokens": 0,
    }
    blocks: list[dict[str, Any]] = [{"type": "text", "text": reply.text}] if reply.text else []
    blocks += [{"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments} for c in reply.tool_calls]
    stop = "tool_use" if reply.tool_calls else "end_turn"
    message = {
        "id": new_id("msg_"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": blocks,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": usage,
    }
    if not req.stream:
        return _json(200, message)
    chunks = [
        _sse(
            "message_start",
            {
                "type": "message_start",
                "message": {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 0}},
            },
        )
    ]
    for i, b in enumerate(blocks):
        if b["type"] == "text":
            start, delta = {"type": "text", "text": ""}, {"type": "text_delta", "text": b["text"]}
        else:
            start = {**b, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(b["input"])}
        chunks += [
            _sse("content_block_start", {"type": "content_block_start", "index": i, "content_block": start}),
            _sse("content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta}),
            _sse("content_block_stop", {"type": "content_block_stop", "index": i}),
        ]
    chunks += [
        _sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": u.output_tokens},
            },
        ),
        _sse("message_stop", {"type": "message_stop"}),
    ]
    return _stream(chunks)


def _render_responses(req: Request, reply: Reply, model: str) -> Rendered:
    u = reply.usage
    items: list[dict[str, Any]] = []
    if reply.text:
        items.append(
            {
                "type": "message",
                "id": new_id("msg_"),
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": reply.text, "annotations": []}],
            }
        )
    for c in reply.tool_calls:
        tool = req.tool(c.name)
        if tool is not None and tool.kind == "custom":
            items.append(
                {
                    "type": "custom_tool_call",
                    "id": new_id("ctc_"),
                    "status": "completed",
                    "call_id": c.id,
                    "name": c.name,
                    "input": str(c.arguments.get("input", "")),
                }
            )
        else:
            items.append(
                {
                    "type": "function_call",
                    "id": new_id("fc_"),
                    "status": "completed",
                    "call_id": c.id,
                    "name": c.name,
                    "arguments": json.dumps(c.arguments),
                }
            )
    response = {
        "id": new_id("resp_"),
        "object": "response",
        "created_at": int(time.time()),
        "status": "completed",
        "model": model,
        "output": items,
        "usage": {
            "input_tokens": u.input_tokens,
            "input_tokens_details": {"cached_tokens": u.cached_input_tokens},
            "output_tokens": u.output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": u.input_tokens + u.output_tokens,
        },
    }
    if not req.stream:
        return _json(200, response)
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": {**response, "status": "in_progress", "output": []}}
    ]
    for i, it in enumerate(items):
        events.append(
            {
                "type": "response.output_item.added",
                "output_index": i,
                "item": {**it, "status": "in_progress"}
                if it["type"] != "message"
                else {**it, "status": "in_progress", "content": []},
            }
        )
        if it["type"] == "message":
            part = it["content"][0]
            where = {"item_id": it["id"], "output_index": i, "content_index": 0}
            events += [
                {"type": "response.content_part.added", **where, "part": {**part, "text": ""}},
                {"type": "response.output_text.delta", **where, "delta": part["text"]},
                {"type": "response.output_text.done", **where, "text": part["text"]},
                {"type": "response.content_part.done", **where, "part": part},
            ]
        elif it["type"] == "function_call":
            where = {"item_id": it["id"], "output_index": i}
            events += [
                {"type": "response.function_call_arguments.delta", **where, "delta": it["arguments"]},
                {"type": "response.function_call_arguments.done", **where, "arguments": it["arguments"]},
            ]
        events.append({"type": "response.output_item.done", "output_index": i, "item": it})
    events.append({"type": "response.completed", "response": response})
    return _stream([_sse(e["type"], {**e, "sequence_number": n}) for n, e in enumerate(events)])


def _render_chat(req: Request, reply: Reply, model: str) -> Rendered:
    u = reply.usage
    usage = {
        "prompt_tokens": u.input_tokens,
        "completion_tokens": u.output_tokens,
        "total_tokens": u.input_tokens + u.output_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_input_tokens},
    }
    calls = [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
        for c in reply.tool_calls
    ]
    finish = "tool_calls" if calls else "stop"
    head = {"id": new_id("chatcmpl-"), "created": int(time.time()), "model": model}
    if not req.stream:
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
        if calls:
            message["tool_calls"] = calls
        return _json(
            200,
            {
                **head,
                "object": "chat.completion",
                "usage": usage,
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            },
        )
    chunk = {**head, "object": "chat.completion.chunk"}
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": reply.text}]
    deltas += [{"tool_calls": [{"index": i, **c}]} for i, c in enumerate(calls)]
    chunks = [_sse(None, {**chunk, "choices": [{"index": 0, "delta": d, "finish_reason": None}]}) for d in deltas]
    chunks += [
        _sse(None, {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}),
        _sse(None, {**chunk, "choices": [], "usage": usage}),
        _sse(None, "[DONE]"),
    ]
    return _stream(chunks)


def _render_gemini(req: Request, reply: Reply, model: str) -> Rendered:
    u = reply.usage
    parts: list[dict[str, Any]] = [{"text": reply.text}] if reply.text else []
    parts += [{"functionCall": {"id": c.id, "name": c.name, "args": c.arguments}} for c in reply.tool_calls]
    doc = {
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {
            "promptTokenCount": u.input_tokens,
            "candidatesTokenCount": u.output_tokens,
            "cachedContentTokenCount": u.cached_input_tokens,
            "totalTokenCount": u.input_tokens + u.output_tokens,
        },
        "modelVersion": model,
        "responseId": new_id(""),
    }
    if not req.stream:
        return _json(200, doc)
    if not req.sse:
        return Rendered(200, "application/json", [json.dumps([doc]).encode()], True)
    return _stream([_sse(None, doc)])


def render(req: Request, reply: Reply, model: str | None = None) -> Rendered:
    """`reply` as the response to `req` in its protocol, streamed when the request asked for a stream;
    `model` (default: the requested one) is the name the response reports."""
    model = model or req.model
    return {
        "anthropic": _render_anthropic,
        "responses": _render_responses,
        "chat": _render_chat,
        "gemini": _render_gemini,
    }[req.protocol](req, reply, model)


def render_error(protocol: WireProtocol, status: int, message: str) -> Rendered:
    """The protocol's error document: what its clients show (and retry on 5xx) instead of failing to parse."""
    if protocol == "anthropic":
        kind = {
            400: "invalid_request_error",
            401: "authentication_error",
            404: "not_found_error",
            413: "request_too_large",
        }.get(status, "api_error")
        return _json(status, {"type": "error", "error": {"type": kind, "message": message}})
    if protocol == "gemini":
        kind = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 404: "NOT_FOUND"}.get(status, "INTERNAL")
        return _json(status, {"error": {"code": status, "message": message, "status": kind}})
    kind = "invalid_request_error" if status < 500 else "server_error"
    return _json(status, {"error": {"message": message, "type": kind, "code": status}})


def send(handler: Any, rendered: Rendered) -> None:
    """Write `rendered` through a http.server request handler; a stream is flushed event by event and ends
    with the connection (HTTP/1.0), so no client waits for more."""
    handler.send_response(rendered.status)
    handler.send_header("Content-Type", rendered.content_type)
    if rendered.stream:
        handler.send_header("Cache-Control", "no-cache")
        handler.close_connection = True
    else:
        handler.send_header("Content-Length", str(sum(map(len, rendered.chunks))))
    handler.end_headers()
    for chunk in rendered.chunks:
        handler.wfile.write(chunk)
        handler.wfile.flush()


def sse_events(data: bytes) -> Iterator[tuple[str | None, Any]]:
    """(event, JSON data) pairs of an SSE body (a `[DONE]` data line comes back as the string)."""
    for block in data.decode().split("\n\n"):
        event, payload = None, None
        for line in block.splitlines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                payload = line[6:]
        if payload is not None:
            yield event, payload if payload == "[DONE]" else json.loads(payload)
