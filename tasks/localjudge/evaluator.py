"""Score localjudge: win rate of the policy's answers against the reference answers, judged by a local model.

The judge (options["judge_model"]: a model directory or builtin:NAME) is served by a2rl.judge on loopback for
the duration of the evaluation, behind a one-time key, and queried over its OpenAI-compatible API like any
remote judge. Policy and judge decode greedily and the server takes one request at a time, so the score of a
given model is reproducible.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path

from a2rl.drivers.chatserver import serve_local_model
from a2rl.grading.judge import ChatClient, compare_to_references, win_rate_summary
from a2rl.spec.models import resolve_model


def evaluate(generator, heldout_dir: Path, options: dict) -> dict:
    rows = [json.loads(line) for line in (Path(heldout_dir) / "test.jsonl").read_text().splitlines() if line]
    references = [r["reference"] for r in rows]
    judge_dir = resolve_model(str(options["judge_model"]))
    key = secrets.token_urlsafe(16)
    with serve_local_model(judge_dir, api_key=key) as base_url:
        client = ChatClient(base_url, judge_dir.name, api_key=key, workers=2)
        comparison = compare_to_references(
            generator, [r["instruction"] for r in rows], references, client,
            max_new_tokens=int(options.get("max_new_tokens", 64)), batch_size=int(options.get("batch_size", 64)))
    summary = win_rate_summary(comparison, references)
    # The loopback URL's port is random: the model path identifies this judge.
    judge = client.describe() | {"base_url": "loopback", "model_path": str(judge_dir)}
    return {"score": summary["win_rate"], **summary, "judge": judge}
