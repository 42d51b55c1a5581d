"""`a2rl submit MODEL_DIR`: submit a model directory to this run's grader and print the /submit answer (blocks
until scored). Run by agents inside their workspace; the client is a2rl/run/client.py."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from a2rl.run.client import post_submit


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model_path")
    p.add_argument(
        "--final",
        action="store_true",
        help="mark it as your pick for the final score (where the sweep's grader.final is `agent`)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=7 * 3600,
        help="seconds without an answer before giving up (default 7 h: above the grader's 6 h wait)",
    )


def run(args: argparse.Namespace) -> int:
    url = os.environ.get("GRADING_SERVER_URL")
    if not url:
        print("error: GRADING_SERVER_URL is not set (a2rl submit runs inside an agent's workspace)", file=sys.stderr)
        return 2
    path = Path(args.model_path)
    model_path = str(path.resolve()) if path.exists() else args.model_path  # else: relative to $WORKSPACE
    body, error = post_submit(f"{url}/submit", model_path, args.timeout, final=args.final)
    if body is not None:  # the server's answer, also when it reports an error: it may carry a submission id
        print(json.dumps(body, indent=1))
    if error:
        print(f"error: {' '.join(error.split())}", file=sys.stderr)  # one line, whatever the server sent
        return 1
    return 0
