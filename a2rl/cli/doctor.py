"""`a2rl doctor [SWEEP.yaml | SWEEP_DIR] [--sweep-dir DIR]`: check the cluster and the sweep directory as a launch of
this sweep would meet them, one line per check (ok / warning / refused, with the fix): Slurm reachable (sinfo,
sbatch, sacct), the partition and its GPUs, the QOS and association limits, the sweep directory's file system
(locks across nodes, visibility lag; on Slurm through a short probe job on the sweep's partition), the isolation
and what the jobs need as seen from that compute node, the proxy variables, models and tasks ready offline.
The file system's verdict is kept in the sweep directory (fscheck.json), where launches reuse it.
Exit 1 when a check is refused, 2 for a sweep that does not validate."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", type=Path, nargs="?", help="sweep.yaml, or a sweep directory")
    p.add_argument("--sweep-dir", type=Path, help="the sweep directory to check (default a2rl-sweeps/<name>)")
    p.add_argument("--executor", choices=["local", "slurm", "auto"], help="check for this executor, not the sweep's")


def run(args: argparse.Namespace) -> int:
    from a2rl.errors import SpecError
    from a2rl.scheduling import doctor
    from a2rl.scheduling.base import Schedulers, resolve_kind
    from a2rl.scheduling.fscheck import check
    from a2rl.scheduling.launcher import DEFAULT_SWEEPS, read_target
    from a2rl.scheduling.node import PROXY_VARS
    from a2rl.store.sweepdir import SweepDir

    target = args.target or args.sweep_dir
    if target is None:
        print("error: give a sweep.yaml or a sweep directory (--sweep-dir DIR)", file=sys.stderr)
        return 2
    try:
        spec, runs, existing = read_target(target)
    except SpecError as e:
        for line in e.lines:
            print(f"error: {line}", file=sys.stderr)
        return 2
    directory = existing.root if existing else (args.sweep_dir or DEFAULT_SWEEPS / spec.name)
    directory.mkdir(parents=True, exist_ok=True)
    kind = resolve_kind(args.executor or spec.executor)
    folder = SweepDir(directory).jobs / time.strftime("doctor-%Y%m%d-%H%M%S")
    schedulers = Schedulers(spec, folder, min_interval_s=2.0)
    rows = doctor.slurm_rows(spec, runs, schedulers[kind]) if kind == "slurm" else doctor.local_rows(directory)
    print(f"checking {directory} for the {kind} executor ...", flush=True)
    verdict = check(directory, spec, kind, folder, schedulers=schedulers)
    rows += doctor.fs_rows(verdict)
    here = {k: v for k, v in os.environ.items() if k in PROXY_VARS and v}
    rows.append(doctor.proxy_row(here, verdict.facts if kind == "slurm" else None, spec.network))
    rows.append(doctor.offline_row(spec, verdict))
    print(doctor.render(rows))
    code = doctor.exit_code(rows)
    print(f"verdict kept in {directory / 'fscheck.json'}" + ("; refused: fix the lines above first" if code else ""))
    return code
