"""`a2rl calibrate`: measure evaluation noise: grade the baseline (and --best submissions) K times per judge task."""

from __future__ import annotations

import argparse
from pathlib import Path

from a2rl.cli.common import NotASweep, open_sweep_dir


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("sweep_dir", type=Path)
    p.add_argument("--repeats", type=int, default=5, help="gradings of each set of weights (default 5)")
    p.add_argument("--tasks", help="comma-separated tasks to calibrate (default: the judge tasks)")
    p.add_argument("--best", action="store_true", help="also re-grade each run's best submission (kept weights)")


def run(args: argparse.Namespace) -> int:
    from a2rl.grading.calibrate import calibrate

    sweep = open_sweep_dir(args.sweep_dir)
    if args.repeats < 2:
        raise NotASweep(f"--repeats must be 2 or more to measure noise, got {args.repeats}")
    tasks = args.tasks.split(",") if args.tasks else None
    if unknown := sorted(set(tasks or ()) - set(sweep.spec.tasks)):
        raise NotASweep(f"no task {', '.join(map(repr, unknown))} in {sweep.root}")
    calibrate(sweep, args.repeats, tasks=tasks, best=args.best)
    return 0
