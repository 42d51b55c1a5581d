"""Grader autoscale: the same burst of submissions to a slow evaluator, graded by one grader (`workers: 1`) and
by graders that scale (`workers: auto`), both on the local executor in one run.

    python tools/bench/grader_autoscale.py [--burst 8] [--eval-s 5] [--max-workers 3] [--scale-wait-s 2]

Prints, for each side, the number of graders that graded, the time from the first claim to the last score, and
the mean and largest wait (submitted -> claimed). Uses the tiny model and the test task `echo`
(tests/fixtures/tasks) with `sleep_s`: each evaluation is a model load, one generated token and that sleep.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"


def burst(tmp: Path, workers: int | str, args: argparse.Namespace) -> str:
    import yaml

    from a2rl.run.budget import Budget
    from a2rl.run.submit import RunSubmitter
    from a2rl.run.workspace import Workspace
    from a2rl.scheduling.launcher import Launcher, open_sweep
    from a2rl.store.modeldirs import resolve_model
    from a2rl.store.services import ServiceJobs

    sys.path.insert(0, str(FIXTURES / "agents"))
    from variants import make_variant

    spec = tmp / f"w{workers}.yaml"
    grader = {
        "workers": workers,
        "max_workers": args.max_workers,
        "scale_wait_s": args.scale_wait_s,
        "scale_idle_s": 5,
        "poll_s": 0.05,
        "lease_s": 30,
        "idle_timeout_s": 30,
        "task_options": {"echo": {"sleep_s": args.eval_s}},
    }
    spec.write_text(
        yaml.safe_dump(
            {
                "name": f"w{workers}",
                "tasks": ["echo"],
                "agents": ["baseline"],
                "models": ["builtin:tiny-llama"],
                "seeds": list(range(args.burst)),
                "budget": 3600,
                "executor": "local",
                "task_paths": [str(FIXTURES / "tasks")],
                "agent_paths": [str(FIXTURES / "agents")],
                "grader": grader,
            }
        )
    )
    sweep, runs = open_sweep(spec, tmp / f"sd-{workers}")
    base = resolve_model("builtin:tiny-llama")
    launcher = Launcher(sweep, "local")
    launcher.submit([])
    while not sweep.serving_graders():
        time.sleep(0.2)
    for i, run in enumerate(runs):
        ws = Workspace(tmp / f"ws-{workers}" / run.run_id)
        ws.code.mkdir(parents=True)
        model = make_variant(base, ws.output / "v", score=float(i), salt=i + 1)
        RunSubmitter(sweep, run, ws, Budget(1e9)).submit(str(model), wait=False)
    while len(entries := sweep.ledger.all_entries()) < args.burst:
        time.sleep(0.5)
    launcher.scheduler.cancel(ServiceJobs.load(sweep.grader_jobs).job_ids)
    waits = [e.claimed_at - e.submitted_at for e in entries]
    drained = max(e.graded_at for e in entries) - min(e.claimed_at for e in entries)
    return (
        f"workers {workers!s:>4}: {len({e.grader for e in entries})} grader(s), drained in {drained:6.1f} s, wait "
        f"mean {statistics.mean(waits):6.1f} s, max {max(waits):6.1f} s"
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--burst", type=int, default=8, help="submissions at once")
    p.add_argument("--eval-s", type=float, default=5.0, help="seconds each evaluation sleeps")
    p.add_argument("--max-workers", type=int, default=3)
    p.add_argument("--scale-wait-s", type=float, default=2.0)
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="a2rl-bench-"))
    os.environ.setdefault("A2RL_CACHE", str(tmp / "cache"))
    lines = [burst(tmp, workers, args) for workers in (1, "auto")]
    print(f"burst of {args.burst}, {args.eval_s:g} s evaluations, local executor, {os.cpu_count()} CPU(s):")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
