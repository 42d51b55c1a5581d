"""`a2rl aggregate SWEEP_DIR...` (or `python -m a2rl.aggregate`): the results tables of one or several sweeps."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from a2rl.cli.common import not_a_sweep
from a2rl.errors import SpecError
from a2rl.records import RecordError
from a2rl.reporting.aggregate import FORMATS, TIDY, Sweeps, export, format_tables, notes, tables
from a2rl.store.sweepdir import SweepDir


def ks(text: str) -> list[int]:
    try:
        out = [int(k) for k in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected k values like 1,3,5, got {text!r}") from None
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError(f"k values must be 1 or more, got {text!r}")
    return out


def table_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--layout", default="long", choices=["long", "paper"], help="paper: one Table-2 block per base model"
    )
    p.add_argument("--by", choices=["mode"], help="mode: mode × task mean improvement")
    p.add_argument("--pass-at", type=ks, metavar="K,K,...", help="expected best improvement over k runs")
    p.add_argument(
        "--scaling", action="store_true", help="best score at budget fractions, token counts and submission counts"
    )
    p.add_argument("--routes", action="store_true", help="training of each run's best submission")
    p.add_argument("--failures", action="store_true", help="failures by cause: infrastructure or agent")
    p.add_argument("--usage", action="store_true", help="tokens and cost per cell")
    p.add_argument(
        "--submissions", action="store_true", help="submissions per run (csv/json/parquet: a row per submission)"
    )
    p.add_argument("--per-run", action="store_true", help="a row per run: status, score, improvement, tokens, cost")
    p.add_argument("--flags", action="store_true", help="the inspector's verdicts per run (a2rl inspect)")


def open_sweeps(paths: list[Path]) -> Sweeps:
    """The sweeps at `paths`, merged; SpecError for a directory that is not a sweep, or conflicting ones."""
    dirs = []
    for path in paths:
        sweep = SweepDir(path)
        if not sweep.exists():
            raise SpecError([not_a_sweep(path)])
        dirs.append(sweep)
    return Sweeps(dirs)


def selected(sw: Sweeps, args: argparse.Namespace):
    return tables(
        sw,
        layout=args.layout,
        by=args.by,
        pass_at=args.pass_at,
        scaling=args.scaling,
        routes=args.routes,
        failures=args.failures,
        usage=args.usage,
        submissions=args.submissions,
        per_run=args.per_run,
        flags=args.flags,
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("sweep_dirs", type=Path, nargs="+", metavar="SWEEP_DIR")
    p.add_argument(
        "--format",
        default="simple",
        choices=FORMATS,
        help="simple, github, latex: display strings; csv, json, parquet: tidy data (numbers, a row per cell)",
    )
    p.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="csv, json, parquet: write each table to DIR/<table>.<format> (needed for parquet and several csv tables)",
    )
    table_options(p)


def main(argv: list[str] | None = None) -> int:
    """`python -m a2rl.aggregate`: the same as `a2rl aggregate`."""
    from a2rl.cli.main import main as a2rl

    return a2rl(["aggregate", *(sys.argv[1:] if argv is None else argv)])


def run(args: argparse.Namespace) -> int:
    try:
        if args.out is not None and args.format not in TIDY:
            raise SpecError([f"--out is for --format {', '.join(TIDY)}; {args.format} prints to stdout"])
        sw = open_sweeps(args.sweep_dirs)
        if args.format in TIDY:
            print(export(sw, selected(sw, args), args.format, args.out))
            if args.format != "json" or args.out is not None:  # json holds its notes; csv has no room for them
                for note in notes(sw):
                    print(f"note: {note}", file=sys.stderr)
        else:
            print(format_tables(sw, selected(sw, args), args.format))
    except SpecError as e:
        print("\n".join(f"error: {line}" for line in e.lines), file=sys.stderr)
        return 2
    except RecordError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for problem in sw.problems:
        print(f"skipped: {problem}", file=sys.stderr)
    return 0
