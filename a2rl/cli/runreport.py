"""`a2rl runreport`: rebuild run reports (runs/<id>/report/) from the sweep directory."""

from __future__ import annotations

import argparse
from pathlib import Path

from a2rl.cli.common import NotASweep, open_sweep_dir


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("sweep_dir", type=Path)
    p.add_argument("run_ids", nargs="*", help="default: every run with a result")


def run(args: argparse.Namespace) -> int:
    from a2rl.reporting.runreport import write_run_report

    sweep = open_sweep_dir(args.sweep_dir)
    known = {r.run_id for r in sweep.runs()}
    if unknown := [r for r in args.run_ids if r not in known]:
        raise NotASweep(f"no run {', '.join(map(repr, unknown))} in {sweep.root}")
    ids = args.run_ids or [r for r in sorted(known) if sweep.result_path(r).exists()]
    for run_id in ids:
        print(write_run_report(sweep, run_id))
    return 0
