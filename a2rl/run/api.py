"""The paper's grading API, served on loopback inside the agent's job.

    POST $GRADING_SERVER_URL/submit {"model_path": ...}  → {submission_id, score, baseline_score, improvement,
                                                            best, total_submissions, error?}
    GET  $GRADING_SERVER_URL/health, GET $GRADING_SERVER_URL/time

The URL carries a random path prefix, so on a shared node another user's process cannot submit for this run.
It feeds the same queue as every other submission path; it never grades anything itself.
"""

from __future__ import annotations

import secrets
from http.server import ThreadingHTTPServer
from typing import Any, Callable

from a2rl.run.budget import Budget
from a2rl.httpjson import JSONRequestHandler, running
from a2rl.run.submit import BudgetExhausted, RunSubmitter


class GradingAPI:
    def __init__(self, submitter: RunSubmitter, budget: Budget, *, on_submit: Callable[[dict], None] = lambda r: None,
                 wrap_up: Callable[[], bool] = lambda: False):
        self.submitter, self.budget, self.on_submit, self.wrap_up = submitter, budget, on_submit, wrap_up
        self.prefix = "/" + secrets.token_urlsafe(12)
        api = self

        class Handler(JSONRequestHandler):
            def _route(self) -> str | None:
                path = self.path.split("?", 1)[0]
                return path[len(api.prefix):] if path.startswith(api.prefix + "/") else None

            def do_GET(self) -> None:
                route = self._route()
                if route == "/health":
                    self.send_json(200, {"status": "ok", "run_id": api.submitter.run.run_id,
                                         "task": api.submitter.run.task})
                elif route == "/time":
                    self.send_json(200, api.time())
                else:
                    self.send_json(404, {"error": "unknown endpoint; use /submit, /health or /time"})

            def do_POST(self) -> None:
                if self._route() != "/submit":
                    self.send_json(404, {"error": "unknown endpoint; use POST /submit"})
                    return
                try:
                    body = self.read_json()
                    if not isinstance(body, dict):
                        raise ValueError("expected a JSON object")
                except ValueError as e:
                    self.send_json(400, {"error": f"bad request body: {e}; send {{\"model_path\": \"...\"}}"})
                    return
                try:
                    result = api.submitter.submit(body.get("model_path"))
                except BudgetExhausted as e:
                    self.send_json(403, {"error": str(e)})
                    return
                api.on_submit(result)
                self.send_json(200, result)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}{self.prefix}"
        self._serving = running(self._server)

    def time(self) -> dict:
        return {"budget_s": self.budget.total_s, "used_s": round(self.budget.used(), 1),
                "remaining_s": round(self.budget.remaining(), 1), "wrap_up": self.wrap_up()}

    def __enter__(self) -> "GradingAPI":
        self._serving.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._serving.__exit__(*exc)
