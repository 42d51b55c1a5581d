"""A neutral Reply (drivers/protocols.py) as each wire protocol's response, streamed (SSE) when the request asked
for a stream: `render`; and each protocol's error document: `render_error`."""

from __future__ import annotations

import json
import time
from typing import Any

from a2rl.drivers.protocols import Rendered, Reply, Request, WireProtocol, new_id


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


def _responses_items(req: Request, reply: Reply) -> list[dict[str, Any]]:
    """The Responses output items of a reply: its text as a message, and its tool calls (custom or function)."""
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
    return items


def _render_responses(req: Request, reply: Reply, model: str) -> Rendered:
    u = reply.usage
    items = _responses_items(req, reply)
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
