"""`a2rl migrate SWEEP_DIR`: rewrite the sweep directory's records written by older a2rl releases as this a2rl's
versions, in place (a2rl/scheduling/migrate.py). Every file it replaces is copied first to
SWEEP_DIR/migrate-backup/<UTC time>/; running it again changes nothing. It refuses a sweep at work. No migration is
needed to read an older sweep: every command upgrades its records as it reads them."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from a2rl.cli.common import open_sweep_dir


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("sweep_dir", type=Path)


def run(args: argparse.Namespace) -> int:
    from a2rl.scheduling.migrate import SweepAtWork, migrate

    try:
        done = migrate(open_sweep_dir(args.sweep_dir))
    except SweepAtWork as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(done.summary())
    return 1 if done.left else 0
