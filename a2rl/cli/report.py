"""`a2rl report`: write a static HTML report of one or several sweeps (tables, plots, links to each run's report)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from a2rl.cli.common import NotASweep


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("sweep_dirs", type=Path, nargs="+", metavar="SWEEP_DIR")
    p.add_argument("--out", type=Path, help="directory for index.html and its plots (default: FIRST_SWEEP_DIR/report)")


def run(args: argparse.Namespace) -> int:
    from a2rl.cli.aggregate import open_sweeps
    from a2rl.errors import SpecError
    from a2rl.reporting.html import write_report

    try:
        sw = open_sweeps(args.sweep_dirs)
    except SpecError as e:
        raise NotASweep("; ".join(e.lines)) from None
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise NotASweep("a2rl report draws its plots with matplotlib: pip install 'a2rl[report]'") from None
    print(write_report(sw, args.out or sw.dirs[0].root / "report"))
    for problem in sw.problems:
        print(f"skipped: {problem}", file=sys.stderr)
    return 0
