"""`python -m a2rl.aggregate SWEEP_DIR`: the results table of a sweep."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from a2rl.records import RecordError
from a2rl.reporting.aggregate import __doc__ as DOC, render
from a2rl.store.sweepdir import SweepDir


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m a2rl.aggregate", description=DOC,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sweep_dir", type=Path)
    p.add_argument("--format", default="simple", choices=["simple", "github", "latex", "csv"])
    args = p.parse_args(argv)
    sweep = SweepDir(args.sweep_dir)
    if not sweep.exists():
        print(f"error: {args.sweep_dir} is not a sweep directory (no sweep.json)", file=sys.stderr)
        return 2
    problems: list[str] = []
    try:
        print(render(sweep, args.format, problems))
    except RecordError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for problem in problems:
        print(f"skipped: {problem}", file=sys.stderr)
    return 0

