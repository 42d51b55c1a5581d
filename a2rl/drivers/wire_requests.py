"""Each wire protocol's request body in the neutral form of drivers/protocols.py: `parse_request`, with a
ProtocolError (HTTP 400) where a body breaks its protocol."""

from __future__ import annotations

import json
from typing import Any

from a2rl.drivers.protocols import Message, ProtocolError, Request, Route, Tool, ToolCall, ToolResult


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
