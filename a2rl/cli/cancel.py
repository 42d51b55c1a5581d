"""`a2rl cancel`: cancel a sweep's unfinished runs (or one run) and, for a whole sweep, its graders and driver
servers."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from a2rl.cli.common import open_sweep_dir


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("sweep_dir", type=Path)
    p.add_argument("--run", help="only this run id")


def run(args: argparse.Namespace) -> int:
    from a2rl.records import atomic_write_text
    from a2rl.scheduling.base import Schedulers
    from a2rl.scheduling.monitor import collect, reap_lost
    from a2rl.store.results import mark_lost
    from a2rl.store.services import service_jobs

    sweep = open_sweep_dir(args.sweep_dir)
    runs = [r for r in sweep.runs() if args.run in (None, r.run_id)]
    if not runs:
        print(f"error: no run {args.run!r} in {sweep.root}", file=sys.stderr)
        return 2
    by_kind: dict[str, list[str]] = {}
    deferred = 0
    for run in runs:
        status = sweep.status(run.run_id)
        if sweep.result_path(run.run_id).exists() or status is None:
            continue
        if status.state == "deferred":  # never submitted: no job to cancel, and no top-up may submit it now
            atomic_write_text(sweep.run_dir(run.run_id) / "cancelled", "")
            mark_lost(sweep, run, "deferred, never submitted")
            deferred += 1
        elif status.job_id is not None:
            atomic_write_text(sweep.run_dir(run.run_id) / "cancelled", "")
            by_kind.setdefault(status.executor or "local", []).append(status.job_id)
    for service in service_jobs(sweep) if args.run is None else []:
        by_kind.setdefault(service.executor, []).extend(service.job_ids)
    schedulers = Schedulers()
    for kind, ids in by_kind.items():
        schedulers[kind].cancel(ids)
        print(f"cancelled {len(ids)} {kind} job(s): {' '.join(ids)}")
    if deferred:
        print(f"cancelled {deferred} deferred run(s)")
    reap_lost(sweep, collect(sweep, schedulers))
    return 0
