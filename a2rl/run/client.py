"""The agent's side of the grading API (run/api.py): `a2rl submit` POSTs a model directory to
$GRADING_SERVER_URL/submit with the run's token. Standard library only: it runs in the agent's environment."""

from __future__ import annotations

import http.client
import json
import os
import urllib.error
import urllib.request


def post_submit(url: str, model_path: str, timeout_s: float, final: bool = False) -> tuple[dict | None, str | None]:
    """(the server's JSON object or None, an error message or None). Every failure of the server or the
    connection is an error message here, never an exception: an agent reads one line, not a traceback."""
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
    status = 200
    try:
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as e:
            status, raw = e.code, e.read()
    except urllib.error.URLError as e:
        return None, f"cannot reach the grading server at {url}: {e.reason}"
    except TimeoutError:
        return None, f"the grading server at {url} did not answer within {timeout_s:g} s"
    except (OSError, http.client.HTTPException) as e:  # reset, closed without an answer, truncated body
        return None, f"the grading server at {url} broke off the answer: {e!r}"
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
