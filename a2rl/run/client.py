"""The agent's side of the grading API (run/api.py): `a2rl submit` POSTs a model directory to
$GRADING_SERVER_URL/submit with the run's token. Standard library only: it runs in the agent's environment."""

from __future__ import annotations

import http.client
import json
import os
import time
import urllib.error
import urllib.request
from typing import Callable

RETRIES_503 = 5  # a 503 with Retry-After (the sweep directory busy or failing for now) is tried again this often
MOST_WAIT_S = 60.0  # whatever Retry-After says


def post_submit(
    url: str, model_path: str, timeout_s: float, final: bool = False, sleep: Callable[[float], object] = time.sleep
) -> tuple[dict | None, str | None]:
    """(the server's JSON object or None, an error message or None). Every failure of the server or the
    connection is an error message here, never an exception: an agent reads one line, not a traceback. A 503
    with Retry-After (nothing was enqueued) is sent again after that wait, up to RETRIES_503 times."""
    headers = {
        "Content-Type": "application/json",
        "Authorization": f"Bearer {os.environ.get('GRADING_TOKEN', '')}",
    }  # the run's credential
    req = urllib.request.Request(
        url,
        data=json.dumps({"model_path": model_path, **({"final": True} if final else {})}).encode(),
        headers=headers,
        method="POST",
    )
    for _ in range(RETRIES_503):
        status, raw, retry_after = _post(req, timeout_s)
        if status != 503 or retry_after is None:
            break
        sleep(retry_after)
    else:
        status, raw, _ = _post(req, timeout_s)
    if isinstance(raw, str):
        return None, raw
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    if not isinstance(body, dict):
        return None, f"the grading server answered HTTP {status} without a JSON object: {raw[:200]!r}"
    if body.get("error"):
        return body, str(body["error"]) + ("" if status == 200 else f" (HTTP {status})")
    if status != 200:
        return body, f"the grading server answered HTTP {status}"
    return body, None


def _post(req: urllib.request.Request, timeout_s: float) -> tuple[int, bytes | str, float | None]:
    """(HTTP status, the body or an error message, the Retry-After seconds if any)."""
    url = req.full_url
    try:
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:
                return 200, resp.read(), None
        except urllib.error.HTTPError as e:
            return e.code, e.read(), _seconds(e.headers.get("Retry-After"))
    except urllib.error.URLError as e:
        return 0, f"cannot reach the grading server at {url}: {e.reason}", None
    except TimeoutError:
        return 0, f"the grading server at {url} did not answer within {timeout_s:g} s", None
    except (OSError, http.client.HTTPException) as e:  # reset, closed without an answer, truncated body
        return 0, f"the grading server at {url} broke off the answer: {e!r}", None


def _seconds(value: str | None) -> float | None:
    try:
        return min(max(float(value), 0.0), MOST_WAIT_S) if value is not None else None
    except ValueError:
        return None
