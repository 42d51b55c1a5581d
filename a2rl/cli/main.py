"""The `a2rl` command: one module per subcommand under a2rl/cli/ (each with add_arguments and run); only the
module of the command given is imported, so `a2rl submit` in an agent's environment stays light."""

from __future__ import annotations

import argparse
import importlib
import sys

from a2rl.cli.common import NotASweep
from a2rl.version import __version__

# name → (module under a2rl.cli, one-line help)
COMMANDS = {
    "launch": ("launch", "launch a sweep: validate, freeze, submit graders and runs (python -m a2rl.launch)"),
    "validate": ("validate", "check a sweep file as a launch would, with no side effects"),
    "status": ("status", "one line per run: state, job, best score, tokens and cost"),
    "aggregate": ("aggregate", "results tables of one or several sweeps (python -m a2rl.aggregate)"),
    "report": ("report", "write a static HTML report of one or several sweeps"),
    "runreport": ("runreport", "rebuild run reports (runs/<id>/report/) from the sweep directory"),
    "inspect": ("inspector", "an LLM judge flags rule violations in runs (verdicts with evidence; scores unchanged)"),
    "cancel": ("cancel", "cancel a sweep's unfinished runs (or one run) and its service jobs"),
    "doctor": (
        "doctor",
        "check the cluster and the sweep directory's file system as a launch would (one line per check)",
    ),
    "audit": ("audit", "probe what the sweep's agents can reach; exit 1 when held-out data is reachable"),
    "grade": ("grade", "run a grading daemon for a sweep in the foreground"),
    "calibrate": ("calibrate", "measure evaluation noise: grade the baseline (and --best) K times per judge task"),
    "prepare": ("prepare", "prepare a task's data (train split for agents, held-out split for the grader)"),
    "ls": ("ls", "list tasks, agent stacks, cluster profiles or generation presets"),
    "fetch-model": ("fetch", "download a hub model's safetensors onto the shared file system"),
    "build-tiny-model": ("tinymodel", "build the tiny offline test model"),
    "submit": ("submit", "(agents) submit a model directory to this run's grader and print the answer"),
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="a2rl", description="Run Agent² RL-Bench sweeps locally or on Slurm.")
    p.add_argument("--version", action="version", version=f"a2rl {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    for name, (module, help) in COMMANDS.items():
        if argv and argv[0] == name:
            mod = importlib.import_module(f"a2rl.cli.{module}")
            s = sub.add_parser(
                name, help=help, description=mod.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
            )
            mod.add_arguments(s)
            s.set_defaults(fn=mod.run)
        else:
            sub.add_parser(name, help=help)
    args = p.parse_args(argv)
    try:
        return args.fn(args)
    except NotASweep as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
