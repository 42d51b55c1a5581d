"""JSON over HTTP on loopback: the request handler and background serving shared by the grading API and the
local model server. Every request gets a JSON answer: protocol errors too (send_error), and an exception in a
handler becomes a 500 through `answer`."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

log = logging.getLogger("a2rl.http")
DRAIN_MAX = 16 << 20  # bytes of an oversized body read before answering 413


class BadRequest(ValueError):
    def __init__(self, status: int, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.status, self.retry_after = status, retry_after


class JSONRequestHandler(BaseHTTPRequestHandler):
    """JSON in and out, access lines to the debug log rather than stderr (an agent's log stays its own)."""

    max_body = 1 << 20

    def read_json(self) -> Any:
        """The body as JSON; BadRequest (400, or 413 past max_body) for anything else."""
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            raise BadRequest(400, "Content-Length is not a number") from None
        if length > self.max_body or length < 0:
            # read (and drop) a moderately oversized body, so the client gets its 413 rather than a broken pipe;
            # past DRAIN_MAX the connection is just closed after the answer
            left = length if 0 < length <= DRAIN_MAX else 0
            while left > 0 and (chunk := self.rfile.read(min(1 << 16, left))):
                left -= len(chunk)
            self.close_connection = True
            raise BadRequest(413, f"request body of {length} bytes; at most {self.max_body} accepted")
        try:
            return json.loads(self.rfile.read(length) or b"{}")
        except ValueError as e:  # invalid UTF-8 included
            raise BadRequest(400, f"the body is not JSON: {e}") from None

    def answer(self, handle: Callable[[], None]) -> None:
        """Run a request's handler; a BadRequest becomes its 4xx, anything else a 500, both as JSON."""
        try:
            handle()
        except BadRequest as e:
            extra = {} if e.retry_after is None else {"Retry-After": f"{e.retry_after:.0f}"}
            self.send_json(e.status, {"error": str(e)}, extra)
        except Exception as e:
            log.exception("request %s %s failed", self.command, self.path[:200])
            self.send_json(500, {"error": f"internal error: {type(e).__name__}: {e}"})

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The server's own protocol errors (overlong request line, bad method...), as JSON too."""
        self.close_connection = True
        self.send_json(code, {"error": message or self.responses.get(code, ("error",))[0]})

    def send_json(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)


@contextmanager
def running(server: ThreadingHTTPServer) -> Iterator[str]:
    """Serve from a background thread for the duration of the block; yields `http://HOST:PORT`."""
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="a2rl-http", daemon=True)
    thread.start()
    try:
        host, port = server.server_address[:2]
        yield f"http://{host}:{port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
