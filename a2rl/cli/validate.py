"""`a2rl validate SWEEP.yaml`: check a sweep as a launch would, with no side effects: the schema, every reference
(tasks, agent stacks, cluster profile, presets, models, files), the run grid, and the job shapes against the
models already on disk (a built-in model not built yet is skipped, never built), then print the capacity plan
(scheduling/capacity.py). Exit 2 with one line per problem."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    from a2rl.cli.launch import add_plan_arguments

    p.add_argument("target", type=Path, help="sweep.yaml, or a sweep directory")
    p.add_argument("--executor", choices=["local", "slurm", "auto"], help="plan for this executor, not the sweep's")
    add_plan_arguments(p)


def run(args: argparse.Namespace) -> int:
    from a2rl.errors import SpecError
    from a2rl.scheduling.capacity import print_plan
    from a2rl.scheduling.launcher import read_target
    from a2rl.spec.models import BUILTIN_PREFIX, builtin_dir
    from a2rl.weights import parameter_count
    from a2rl.spec.sizing import shape_problems

    try:
        spec, runs, _ = read_target(args.target)
        dirs = {
            m.name: builtin_dir(m.path.removeprefix(BUILTIN_PREFIX))
            if m.path.startswith(BUILTIN_PREFIX)
            else Path(m.path)
            for m in spec.model_entries
        }
        params = {name: parameter_count(d) for name, d in dirs.items() if (d / "config.json").is_file()}
        if problems := shape_problems(spec, params):
            raise SpecError(problems)
    except SpecError as e:
        for line in e.lines:
            print(f"error: {line}", file=sys.stderr)
        return 2
    unchecked = sorted(set(dirs) - set(params))
    print(
        f"{args.target}: valid: {len(runs)} runs ({', '.join(spec.tasks)} × {len(spec.agents)} agent(s) × "
        f"{len(spec.models)} model(s))"
        + (f"; job shapes not checked for {', '.join(unchecked)} (not built yet)" if unchecked else "")
    )
    print_plan(spec, runs, params, args.executor, args.submissions_per_run)
    return 0
