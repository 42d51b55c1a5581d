"""The LLM vendors' wire protocols, translated to and from one neutral form, so one model backend (the local
driver server, the tests' scripted model) can answer every agent CLI in the protocol it speaks:

- `anthropic`: Anthropic Messages, `POST /v1/messages` (Claude Code), SSE events when `stream` is set;
- `responses`: OpenAI Responses, `POST /v1/responses` (Codex), SSE events when `stream` is set;
- `chat`: OpenAI Chat Completions, `POST /v1/chat/completions` (OpenCode, litellm-based stacks), SSE chunks
  ending in `data: [DONE]` when `stream` is set;
- `gemini`: Gemini `POST /v1beta/models/<model>:generateContent` and `:streamGenerateContent` (Gemini CLI;
  SSE with `?alt=sse`, else one JSON array).

`route` maps a request line to a protocol, `parse_request` (drivers/wire_requests.py) turns its body into a
neutral `Request`, and `render` (drivers/wire_replies.py) turns a neutral `Reply` into that protocol's response
(streaming or not); `render_error` (there too) gives the protocol's error document, so a client sees a refused
request as an API error rather than a broken stream. This module holds the neutral form, `route`, `send` and
`sse_events`.
Real clients of each (tests/test_real_clis.py, through tests/scripted_server.py): claude 2.1.197 (anthropic),
codex 0.169.0 and opencode 1.18.33 (responses), opencode with an OpenAI-compatible provider (chat), gemini
0.61.0 (gemini).
"""

from __future__ import annotations

import json
import secrets
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
