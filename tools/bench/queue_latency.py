"""Queue latency: submit → claimed and submit → recorded, over N submissions through the real job-side path
(RunSubmitter: checks, freeze, enqueue, block) with a real grading daemon (`a2rl grade`) in its own process.

    python tools/bench/queue_latency.py [--n 100] [--poll 0.2] [--concurrent 1] [--idle 10]

Prints p50 and p90 of submit → claimed and submit → recorded, and the grader's CPU use while idle (the CPU
time of its threads over --idle seconds with nothing queued, after its baseline). Uses the tiny model and the
test task `echo` (tests/fixtures/tasks), whose evaluation is a model load and one generated token, so the
figures are the queue's, not a task's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=100, help="submissions per submitter")
    p.add_argument("--poll", type=float, default=0.2, help="grader poll interval (the sweep default is 0.2 s)")
    p.add_argument("--concurrent", type=int, default=1, help="submitters at once")
    p.add_argument("--idle", type=float, default=10.0, help="seconds over which the idle grader's CPU is measured")
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="a2rl-bench-"))
    os.environ.setdefault("A2RL_CACHE", str(tmp / "cache"))
    import yaml

    from a2rl.scheduling.launcher import open_sweep
    from a2rl.store.modeldirs import resolve_model

    spec = tmp / "bench.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "name": "bench",
                "tasks": ["echo"],
                "agents": ["baseline"],
                "models": ["builtin:tiny-llama"],
                "seeds": list(range(args.concurrent)),
                "budget": 3600,
                "executor": "local",
                "task_paths": [str(FIXTURES / "tasks")],
                "grader": {"poll_s": args.poll, "idle_timeout_s": 3600},
            }
        )
    )
    sweep, runs = open_sweep(spec, tmp / "sd")
    resolve_model("builtin:tiny-llama")
    grader = subprocess.Popen(
        [sys.executable, "-m", "a2rl", "grade", str(sweep.root)],
        stdout=open(tmp / "grader.log", "w"),
        stderr=subprocess.STDOUT,
    )
    try:
        while not list(sweep.baselines.glob("*.json")):  # let the grader start up and score the baseline
            time.sleep(0.1)
        time.sleep(1.0)  # the grader goes idle once it has written the baseline
        cpu0, t0 = cpu_seconds(grader.pid), time.monotonic()
        time.sleep(args.idle)
        idle_cpu = (cpu_seconds(grader.pid) - cpu0) / (time.monotonic() - t0)
        t0 = time.monotonic()
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    str(FIXTURES / "stress_submitter.py"),
                    str(sweep.root),
                    run.run_id,
                    str(args.n),
                    str(i),
                ],
                stdout=subprocess.DEVNULL,
            )
            for i, run in enumerate(runs)
        ]
        for proc in procs:
            proc.wait()
        wall = time.monotonic() - t0
    finally:
        grader.terminate()
        grader.wait()
    entries = sweep.ledger.all_entries()
    claimed = sorted(e.claimed_at - e.submitted_at for e in entries)
    recorded = sorted(e.graded_at - e.submitted_at for e in entries)
    grading = sorted(e.eval_seconds for e in entries)

    def q(xs: list[float], f: float) -> float:
        return xs[min(len(xs) - 1, int(f * len(xs)))]

    print(
        f"{len(entries)} submissions, {args.concurrent} submitter(s), grader poll {args.poll} s, "
        f"wall {wall:.1f} s ({len(entries) / wall:.1f} submissions/s)"
    )
    for name, xs in (("submit -> claimed", claimed), ("submit -> recorded", recorded), ("evaluation", grading)):
        print(
            f"  {name:20s} p50 {statistics.median(xs) * 1000:7.1f} ms   p90 {q(xs, 0.9) * 1000:7.1f} ms   "
            f"max {xs[-1] * 1000:7.1f} ms"
        )
    print(f"  grader idle CPU      {idle_cpu * 100:.2f}% of one core over {args.idle:g} s")
    return 0


def cpu_seconds(pid: int) -> float:
    """CPU time of a process, all its threads (Linux /proc/<pid>/task/*/schedstat: nanoseconds on a CPU, exact,
    where /proc/<pid>/stat counts 10 ms ticks)."""
    return (
        sum(
            int(Path(f"/proc/{pid}/task/{t}/schedstat").read_text().split()[0]) for t in os.listdir(f"/proc/{pid}/task")
        )
        / 1e9
    )


if __name__ == "__main__":
    raise SystemExit(main())
