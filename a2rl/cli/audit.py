"""`a2rl audit`: probe what the sweep's agents can reach, started as a run starts them; exit 1 when held-out data is."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", type=Path, help="sweep.yaml, or a sweep directory")
    p.add_argument("--sweep-dir", type=Path, help="where the sweep's records go (as for launch)")


def run(args: argparse.Namespace) -> int:
    from a2rl.errors import SpecError
    from a2rl.run.audit import AuditError, audit_path, run_audit
    from a2rl.run.isolation import SandboxError
    from a2rl.scheduling.launcher import open_sweep

    try:
        sweep, _ = open_sweep(args.target, args.sweep_dir)
        record = run_audit(sweep)
    except (SpecError, SandboxError, AuditError) as e:
        for line in getattr(e, "lines", [str(e)]):
            print(f"error: {line}", file=sys.stderr)
        return 2
    print(record.table())
    print(
        f"isolation: {record.isolation} ({record.reason}); network: {record.network}; recorded in {audit_path(sweep)}"
    )
    if record.leaks:
        print(f"{len(record.leaks)} path(s) to held-out data", file=sys.stderr)
        return 1
    return 0
