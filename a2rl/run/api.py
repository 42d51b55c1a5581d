"""The paper's grading API, served on loopback inside the agent's job.

    POST $GRADING_SERVER_URL/submit {"model_path": ..., "final"?: true}  → {submission_id, score, baseline_score,
                                                            improvement, best, total_submissions, error?}
    ("final": the agent's pick for the final part under `feedback: split`; scores are then the feedback part's)
    GET  $GRADING_SERVER_URL/health, GET $GRADING_SERVER_URL/time

Every request carries the run's token, `Authorization: Bearer $GRADING_TOKEN` (or `?token=...`); the token is
given only to this run's agent, and any other caller gets 401. Every request gets a JSON answer: 400 for a
malformed body or model_path, 413 for an oversized body, 403 after the budget, 429 while the run's previous
submission is still in flight, 507 with bytes_used, bytes_needed and bytes_allowed when the submission would take
the run past its storage budget (storage.run_gb; nothing is enqueued for any of them), 503 with `Retry-After`
when the sweep directory could not take the submission (a full disk, the queue's lock held past its timeout, the
shared file system failing: nothing enqueued; `a2rl submit` waits and tries again), 500 if the server itself
fails.
It feeds the same queue as every other submission path; it never grades anything itself.
"""

from __future__ import annotations

import hmac
import secrets
from http.server import ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import parse_qs, urlsplit

from a2rl.httpjson import BadRequest, JSONRequestHandler, running
from a2rl.records import StorageFull
from a2rl.run.artifacts import MalformedPath
from a2rl.run.budget import Budget, BudgetExhausted, WaitInFlight
from a2rl.run.submit import RETRY_AFTER_S, NotEnqueued, OverStorageBudget, RunSubmitter


class _Server(ThreadingHTTPServer):
    request_queue_size = 1024  # a burst of submissions is answered (429), not refused by the kernel


class GradingAPI:
    def __init__(
        self,
        submitter: RunSubmitter,
        budget: Budget,
        *,
        on_submit: Callable[[dict], None] = lambda r: None,
        wrap_up: Callable[[], bool] = lambda: False,
    ):
        self.submitter, self.budget, self.on_submit, self.wrap_up = submitter, budget, on_submit, wrap_up
        self.prefix = "/" + secrets.token_urlsafe(12)
        self.token = secrets.token_urlsafe(32)
        api = self

        class Handler(JSONRequestHandler):
            max_body = 64 << 10

            def _route(self) -> str:
                """The endpoint asked for, once the caller has shown the token (BadRequest 401 otherwise)."""
                url = urlsplit(self.path)
                auth = self.headers.get("Authorization", "")
                given = auth[7:] if auth.startswith("Bearer ") else (parse_qs(url.query).get("token") or [""])[0]
                if not hmac.compare_digest(given.encode(), api.token.encode()):
                    raise BadRequest(401, "missing or wrong token: send 'Authorization: Bearer $GRADING_TOKEN'")
                return url.path[len(api.prefix) :] if url.path.startswith(api.prefix + "/") else ""

            def do_GET(self) -> None:
                self.answer(self._get)

            def _get(self) -> None:
                route = self._route()
                if route == "/health":
                    self.send_json(
                        200, {"status": "ok", "run_id": api.submitter.run.run_id, "task": api.submitter.run.task}
                    )
                elif route == "/time":
                    self.send_json(200, api.time())
                else:
                    self.send_json(404, {"error": "unknown endpoint; use /submit, /health or /time"})

            def do_POST(self) -> None:
                self.answer(self._post)

            def _post(self) -> None:
                if self._route() != "/submit":
                    raise BadRequest(404, "unknown endpoint; use POST /submit")
                body = self.read_json()
                model_path = body.get("model_path") if isinstance(body, dict) else None
                if not isinstance(body, dict) or not isinstance(model_path, (str, type(None))):
                    raise BadRequest(400, 'bad request body: send {"model_path": "<directory>"}')
                if not isinstance(final := body.get("final", False), bool):
                    raise BadRequest(400, 'bad request body: "final" is true or false')
                try:
                    result = api.submitter.submit(model_path, final=final)
                except MalformedPath as e:
                    raise BadRequest(400, str(e)) from None
                except BudgetExhausted as e:
                    raise BadRequest(403, str(e)) from None
                except WaitInFlight as e:
                    raise BadRequest(429, str(e)) from None
                except StorageFull as e:  # waited an hour for room: nothing enqueued, the agent may try again
                    raise BadRequest(503, f"{e.strerror}; nothing was submitted, try again later") from None
                except NotEnqueued as e:  # the lock or the shared file system, for now: worth a retry soon
                    msg = f"{e}; nothing was submitted, try again in {RETRY_AFTER_S} s"
                    raise BadRequest(503, msg, retry_after=RETRY_AFTER_S) from None
                except OverStorageBudget as e:  # the run's storage budget: a smaller submission still fits
                    self.send_json(507, e.answer())
                    return
                api.on_submit(result)
                self.send_json(200, result)

        self._server = _Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}{self.prefix}"
        self._serving = running(self._server)

    def time(self) -> dict:
        return {
            "budget_s": self.budget.total_s,
            "used_s": round(self.budget.used(), 1),
            "remaining_s": round(self.budget.remaining(), 1),
            "wrap_up": self.wrap_up(),
        }

    def __enter__(self) -> "GradingAPI":
        self._serving.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._serving.__exit__(*exc)
