"""`a2rl launch sweep.yaml` (or `python -m a2rl.launch`): validate, freeze the sweep into its directory, and submit the
grader(s) and every unfinished run through submitit (local processes, or Slurm). Returns at once unless `--wait`.

Launching an existing sweep again (its yaml or its directory) submits only what has not finished.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tabulate import tabulate

from a2rl.cli.validate import add_plan_arguments
from a2rl.errors import SpecError
from a2rl.run.audit import AuditError, audit_path
from a2rl.run.isolation import SandboxError
from a2rl.scheduling.launcher import DEFAULT_SWEEPS, Launcher
from a2rl.spec.grid import RunSpec


def print_runs(runs: list[RunSpec]) -> None:
    print(
        tabulate(
            [(r.run_id, r.task, r.agent.key, r.driver, r.model.name, r.seed, f"{r.budget_s:g}") for r in runs],
            headers=["run", "task", "agent", "driver", "model", "seed", "budget s"],
        )
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", type=Path, help="sweep.yaml, or an existing sweep directory to resume")
    p.add_argument("--sweep-dir", type=Path, help=f"where the sweep's records go (default {DEFAULT_SWEEPS}/<name>)")
    p.add_argument("--wait", action="store_true", help="follow progress until every run has finished")
    p.add_argument(
        "--progress-every",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="with --wait and stdout no terminal (a log file): print progress at least this often, and at every "
        "change (default 30)",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the expanded runs, then what `a2rl validate` prints (the checks launch makes here and the "
        "capacity plan); submit nothing",
    )
    add_plan_arguments(p)
    p.add_argument("--retry-failed", action="store_true", help="resubmit runs that ended failed")
    p.add_argument("--executor", choices=["local", "slurm", "auto"], help="override the sweep's executor")
    p.add_argument(
        "--probe",
        action="store_true",
        help="check the sweep directory's file system again (a2rl doctor), not the verdict kept in fscheck.json",
    )
    p.add_argument(
        "--allow-leaks",
        action="store_true",
        help="launch even where the sweep's audit finds a path to held-out data (recorded)",
    )


def main(argv: list[str] | None = None) -> int:
    """`python -m a2rl.launch`: the same as `a2rl launch`."""
    from a2rl.cli.main import main as a2rl

    return a2rl(["launch", *(sys.argv[1:] if argv is None else argv)])


def run(args: argparse.Namespace) -> int:
    try:
        if args.dry_run:
            from a2rl.cli.validate import check, report

            v = check(args.target)
            if v.spec is not None:
                print_runs(v.runs)
                print(f"{len(v.runs)} runs (dry run: nothing submitted)")
            return report(v, args.executor, args.submissions_per_run)
        done = Launcher.launch(
            args.target,
            sweep_dir=args.sweep_dir,
            executor=args.executor,
            retry_failed=args.retry_failed,
            allow_leaks=args.allow_leaks,
            follow=args.wait,
            probe=args.probe,
        )
    except SpecError as e:
        for line in e.lines:
            print(f"error: {line}", file=sys.stderr)
        return 2
    except (SandboxError, AuditError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    sweep, runs, launcher, audit = done.sweep, done.runs, done.launcher, done.audit
    if audit.leaks:
        print(audit.table())
        if done.refused:
            print(
                f"error: the audit ({audit_path(sweep)}) found a path to held-out data under isolation: "
                f"{audit.isolation}; use a sandbox, or launch with --allow-leaks",
                file=sys.stderr,
            )
            return 2
        print(
            f"WARNING: launched with --allow-leaks: agents can reach held-out data (isolation: "
            f"{audit.isolation}); its results are untrusted",
            flush=True,
        )
    print(f"sweep dir: {sweep.root}")
    if done.finished:
        print(f"all {len(runs)} runs have finished; nothing to submit")
    else:
        drivers = f", {len(launcher.driver_jobs)} local driver server(s)" if launcher.driver_jobs else ""
        deferred = (
            f" ({len(launcher.deferred)} more deferred until the queue limit has room)" if launcher.deferred else ""
        )
        print(
            f"submitted {len(launcher.jobs)} of {len(runs)} runs and {len(launcher.grader_jobs)} grader(s){drivers} "
            f"to the {launcher.kind} executor{deferred}"
        )
        if launcher.topup_jobs:
            print(
                f"top-up job {launcher.topup_jobs[0]} watches the sweep until it is done: it submits deferred runs, "
                "marks runs whose job is gone lost and replaces a dead grader"
            )
    if not args.wait:
        print(
            f"follow with: python -m a2rl.launch {sweep.root} --wait   results: python -m a2rl.aggregate {sweep.root}"
        )
        return 0
    try:
        code = launcher.follow(progress_s=args.progress_every)
    except KeyboardInterrupt:
        print(f"\nstopped following; the runs go on. Resume with: python -m a2rl.launch {sweep.root} --wait")
        return 130
    from a2rl.reporting.aggregate import render

    problems: list[str] = []
    print(render(sweep, "simple", problems))
    for problem in problems:
        print(f"skipped: {problem}", file=sys.stderr)
    return code
