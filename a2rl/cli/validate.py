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
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from a2rl.errors import SpecError

if TYPE_CHECKING:  # imported where used: the command line builds its parser without them
    from a2rl.scheduling.readiness import Item
    from a2rl.spec.grid import RunSpec
    from a2rl.spec.sweep import SweepSpec


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


@dataclass
class Validation:
    """What `a2rl validate` found (a2rl.validate returns it): the spec and its runs where the file is valid; `errors`
    (the file: schema, references, job shapes) are errors anywhere; `refused`, what launch refuses on this machine
    (scheduling/readiness.py), are errors unless `elsewhere` (they are checked on the launching machine)."""

    target: Path
    spec: SweepSpec | None
    runs: list[RunSpec] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    readiness: list[Item] = field(default_factory=list)
    planned: dict[str, tuple[int, str]] = field(default_factory=dict)  # model -> (parameters, where from)
    elsewhere: bool = False

    @property
    def ok(self) -> bool:
        """The file is valid and, unless `elsewhere`, launch would accept it here."""
        return self.spec is not None and not self.errors and (self.elsewhere or not self.refused)


def check(target: Path, *, elsewhere: bool = False) -> Validation:
    """Validate `target` (a sweep.yaml or a sweep directory) as a launch would, with no side effects."""
    from a2rl.scheduling.launcher import read_target
    from a2rl.scheduling.readiness import readiness
    from a2rl.spec.sizing import shape_problems
    from a2rl.store.modeldirs import planned_params

    try:
        spec, runs, _ = read_target(target)
    except SpecError as e:
        return Validation(target, None, errors=e.lines, elsewhere=elsewhere)
    planned = planned_params(spec)
    items = readiness(spec)
    return Validation(
        target,
        spec,
        runs,
        errors=shape_problems(spec, {name: n for name, (n, _) in planned.items()}),
        refused=[line for item in items for line in item.problems],
        readiness=items,
        planned=planned,
        elsewhere=elsewhere,
    )


def run(args: argparse.Namespace) -> int:
    return report(check(args.target, elsewhere=args.elsewhere), args.executor, args.submissions_per_run)


def errors(lines: list[str]) -> int:
    for line in lines:
        print(f"error: {line}", file=sys.stderr)
    return 2


def report(v: Validation, executor: str | None, per_run: int) -> int:
    """Print the checks and the plan of a sweep file; 2 where it is invalid, or launch would refuse it (here,
    unless `elsewhere`)."""
    from a2rl.scheduling.capacity import print_plan

    if v.spec is None:
        return errors(v.errors)
    spec, elsewhere = v.spec, v.elsewhere
    unknown = [m.name for m in spec.model_entries if m.name not in v.planned]
    print(
        f"{v.target}: valid: {len(v.runs)} runs ({', '.join(spec.tasks)} × {len(spec.agents)} agent(s) × "
        f"{len(spec.models)} model(s))"
        + (f"; job shapes not checked for {', '.join(unknown)} (not built yet)" if unknown else "")
    )
    if v.planned:
        sizes = "; ".join(f"{name} {n / 1e9:.2f}B ({source})" for name, (n, source) in v.planned.items())
        print(f"model sizes: {sizes}")
    where = "on the launching machine (--elsewhere: not errors here)" if elsewhere else "on this machine"
    print(f"what launch checks {where}:")
    for item in v.readiness:
        print(f"  {item.name}: " + ("ok" if not item.problems else f"{len(item.problems)} problem(s)"))
        if elsewhere:
            print("".join(f"    launch will check: {line}\n" for line in item.problems), end="")
    print_plan(spec, v.runs, {name: n for name, (n, _) in v.planned.items()}, executor, per_run)
    refused = [] if elsewhere else v.refused
    if v.ok:
        return 0
    errors(v.errors + refused)
    if refused:
        print(
            "error: launch refuses this sweep on this machine until these are fixed (launching from another "
            "machine? validate there, or pass --elsewhere)",
            file=sys.stderr,
        )
    return 2
