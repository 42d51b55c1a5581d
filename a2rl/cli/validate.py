"""`a2rl validate SWEEP.yaml`: check a sweep as a launch would, with no side effects, and print its capacity plan
(scheduling/capacity.py). The sweep file itself (schema, every reference, the run grid) and the job shapes against
the models' sizes, which need no weights (store/modeldirs.py planned_params), are errors anywhere; what launch
refuses on the machine it runs on (scheduling/readiness.py: credentials, agent CLIs, models, prepared data,
isolation) is an error here too, or with --elsewhere (you launch from another machine) a labelled list of what
launch will check there. Exit 2 with one `error:` line per problem; the plan is printed whenever the file is valid.
`a2rl launch --dry-run` prints the same after the runs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_plan_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--submissions-per-run",
        type=int,
        default=10,
        metavar="N",
        help="submissions you expect per run, for the grading estimate of the capacity plan (default 10)",
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", type=Path, help="sweep.yaml, or a sweep directory")
    p.add_argument("--executor", choices=["local", "slurm", "auto"], help="plan for this executor, not the sweep's")
    p.add_argument(
        "--elsewhere",
        action="store_true",
        help="you will launch from another machine (a login node): list what launch checks there (credentials, "
        "agent CLIs, models, prepared data, isolation) instead of failing on what this machine lacks",
    )
    add_plan_arguments(p)


def run(args: argparse.Namespace) -> int:
    from a2rl.errors import SpecError
    from a2rl.scheduling.launcher import read_target

    try:
        spec, runs, _ = read_target(args.target)
    except SpecError as e:
        return errors(e.lines)
    return report(args.target, spec, runs, args.executor, args.submissions_per_run, elsewhere=args.elsewhere)


def errors(lines: list[str]) -> int:
    for line in lines:
        print(f"error: {line}", file=sys.stderr)
    return 2


def report(target: Path, spec, runs: list, executor: str | None, per_run: int, *, elsewhere: bool = False) -> int:
    """The checks and the plan of a valid sweep file; 2 where launch would refuse it (here, unless `elsewhere`)."""
    from a2rl.scheduling.capacity import print_plan
    from a2rl.scheduling.readiness import readiness
    from a2rl.spec.sizing import shape_problems
    from a2rl.store.modeldirs import planned_params

    planned = planned_params(spec)
    params = {name: n for name, (n, _) in planned.items()}
    unknown = [m.name for m in spec.model_entries if m.name not in planned]
    print(
        f"{target}: valid: {len(runs)} runs ({', '.join(spec.tasks)} × {len(spec.agents)} agent(s) × "
        f"{len(spec.models)} model(s))"
        + (f"; job shapes not checked for {', '.join(unknown)} (not built yet)" if unknown else "")
    )
    if planned:
        sizes = "; ".join(f"{name} {n / 1e9:.2f}B ({source})" for name, (n, source) in planned.items())
        print(f"model sizes: {sizes}")
    problems, refused = shape_problems(spec, params), []
    where = "on the launching machine (--elsewhere: not errors here)" if elsewhere else "on this machine"
    print(f"what launch checks {where}:")
    for item in readiness(spec):
        print(f"  {item.name}: " + ("ok" if not item.problems else f"{len(item.problems)} problem(s)"))
        if elsewhere:
            print("".join(f"    launch will check: {line}\n" for line in item.problems), end="")
        else:
            refused += item.problems
    print_plan(spec, runs, params, executor, per_run)
    if not problems + refused:
        return 0
    errors(problems + refused)
    if refused:
        print(
            "error: launch refuses this sweep on this machine until these are fixed (launching from another "
            "machine? validate there, or pass --elsewhere)",
            file=sys.stderr,
        )
    return 2
