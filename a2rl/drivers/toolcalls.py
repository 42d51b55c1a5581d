"""A neutral request (protocols.py) laid onto a local model's chat template, and the model's text read back
into text and tool calls, so every protocol's tool use runs on an open-weight model.

Tool calls use the Hermes convention (Qwen2.5/3, Hermes, many fine-tunes): `<tool_call>{"name": ...,
"arguments": {...}}</tool_call>` in the assistant's text, results as `<tool_response>...</tool_response>`.
Templates that take `tools` (they mention it) get the tools and calls natively; the others (the tiny test
model's) get the tools described in the system message and calls written into the text, the same format.
Text that opens a tool call which is not one (bad JSON, no name, a tool the request did not offer) raises
MalformedToolCall: the client gets an API error saying so, not a reply with the call silently dropped.
"""

from __future__ import annotations

import json
import re
from typing import Any

from a2rl.drivers.protocols import Request, ToolCall, new_id

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_CALL = re.compile(re.escape(OPEN) + r"(.*?)(?:" + re.escape(CLOSE) + r"|$)", re.S)


class MalformedToolCall(ValueError):
    """The model wrote a tool call that cannot be carried out."""


def _call_text(call: ToolCall) -> str:
    return f"{OPEN}\n{json.dumps({'name': call.name, 'arguments': call.arguments})}\n{CLOSE}"


def _tool_docs(req: Request) -> str:
    specs = "\n".join(
        json.dumps({"name": t.name, "description": t.description, "parameters": t.parameters}) for t in req.tools
    )
    return (
        f"# Tools\n\nYou may call these tools:\n<tools>\n{specs}\n</tools>\n\nTo call one, write\n"
        f'{OPEN}\n{{"name": <tool name>, "arguments": <JSON object>}}\n{CLOSE}'
    )


def template_messages(req: Request, native_tools: bool) -> list[dict[str, Any]]:
    """The request's conversation as chat-template messages (string contents)."""
    out: list[dict[str, Any]] = []
    docs = _tool_docs(req) if req.tools and not native_tools else ""
    for m in req.messages:
        if m.role == "system":
            out.append({"role": "system", "content": f"{m.text}\n\n{docs}" if docs else m.text})
            docs = ""
        elif m.role == "tool":
            results = "\n".join(f"<tool_response>\n{r.content}\n</tool_response>" for r in m.tool_results)
            out.append({"role": "tool", "content": results} if native_tools else {"role": "user", "content": results})
        elif m.role == "assistant" and m.tool_calls:
            if native_tools:
                out.append(
                    {
                        "role": "assistant",
                        "content": m.text,
                        "tool_calls": [
                            {"type": "function", "id": c.id, "function": {"name": c.name, "arguments": c.arguments}}
                            for c in m.tool_calls
                        ],
                    }
                )
            else:
                out.append(
                    {"role": "assistant", "content": "\n".join([m.text, *map(_call_text, m.tool_calls)]).strip()}
                )
        else:
            out.append({"role": m.role, "content": m.text})
    if docs:  # no system message to carry them
        out.insert(0, {"role": "system", "content": docs})
    return out


def chat_prompt(tokenizer: Any, req: Request) -> str:
    """The prompt text of `req` in the model's chat template (a plain transcript where it has none)."""
    template = tokenizer.chat_template or ""
    native = "tools" in template
    messages = template_messages(req, native)
    if not template:
        return "".join(f"{m['role'].capitalize()}: {m['content']}\n" for m in messages) + "Assistant:"
    tools = [
        {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}
        for t in req.tools
    ]
    return tokenizer.apply_chat_template(
        messages, tools=(tools or None) if native else None, tokenize=False, add_generation_prompt=True
    )


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, str):  # some models write the arguments as a JSON string, as OpenAI's API carries them
        try:
            raw = json.loads(raw)
        except ValueError:
            raise MalformedToolCall(f"its arguments are not JSON: {raw[:200]!r}") from None
    if not isinstance(raw, dict):
        raise MalformedToolCall("its arguments are not a JSON object")
    return raw


def read_reply(text: str, req: Request) -> tuple[str, list[ToolCall]]:
    """The model's text split into the text it says and the tool calls it makes."""
    calls = []
    for body in (m.group(1).strip() for m in _CALL.finditer(text)):
        try:
            doc = json.loads(body)
        except ValueError:
            raise MalformedToolCall(f"the model wrote a tool call that is not JSON: {body[:200]!r}") from None
        if not (isinstance(doc, dict) and isinstance(doc.get("name"), str)):
            raise MalformedToolCall(f"the model wrote a tool call without a name: {body[:200]!r}")
        if req.tool(doc["name"]) is None:
            raise MalformedToolCall(
                f"the model called tool {doc['name']!r}, which the request does not offer "
                f"(offered: {', '.join(t.name for t in req.tools) or 'none'})"
            )
        try:
            arguments = _arguments(doc.get("arguments", {}))
        except MalformedToolCall as e:
            raise MalformedToolCall(f"the model's call of {doc['name']!r}: {e}") from None
        calls.append(ToolCall(new_id("call_"), doc["name"], arguments))
    return _CALL.sub("", text).strip(), calls
