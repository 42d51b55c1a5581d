"""`a2rl prepare`: prepare a task's data (train split for agents, held-out split for the grader)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("task")
    p.add_argument("--data-root", type=Path)
    p.add_argument("--source", type=Path, help="read the upstream files from this directory instead of downloading")


def run(args: argparse.Namespace) -> int:
    from a2rl.errors import SpecError
    from a2rl.spec.models import default_data_root
    from a2rl.spec.tasks import get_task
    from a2rl.tasklib.prepare import ensure_prepared

    root = args.data_root or default_data_root()
    try:
        data = ensure_prepared(get_task(args.task), root, allow_network=True, source=args.source)
    except SpecError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{args.task}: train {data.train_dir}, held-out {data.heldout_dir}")
    return 0
