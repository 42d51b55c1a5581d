"""`a2rl grade`: run a grading daemon for a sweep in the foreground."""

from __future__ import annotations

import argparse
from pathlib import Path

from a2rl.cli.common import open_sweep_dir


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("sweep_dir", type=Path)
    p.add_argument("--index", type=int, default=0)


def run(args: argparse.Namespace) -> int:
    from a2rl.grading.daemon import run_grader
    from a2rl.reporting.runreport import rebuild_run_report

    return run_grader(str(open_sweep_dir(args.sweep_dir).root), args.index, rebuild_run_report)
