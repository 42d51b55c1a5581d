"""Queue latency: submit → claimed and submit → recorded, over N submissions through the real job-side path
(RunSubmitter: checks, freeze, enqueue, block) with a real grading daemon (`a2rl grade`) in its own process.

    python tools/bench/queue_latency.py [--n 100] [--poll 0.2] [--concurrent 1] [--idle 10] [--views]

Prints p50 and p90 of submit → claimed and submit → recorded, and the grader's CPU use while idle (the CPU
time of its threads over --idle seconds with nothing queued, after its baseline). Uses the tiny model and the
test task `echo` (tests/fixtures/tasks), whose evaluation is a model load and one generated token, so the
figures are the queue's, not a task's. With --views it also runs the same on a sweep directory that the grader
and the submitters see through two different FUSE views (tools/bench/fuseviews.py: bindfs with NFS-like 30-s
attribute caching and lock forwarding, as two cluster nodes see one NFS directory), and prints both side by
side with the load average (needs root).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
sys.path.insert(0, str(Path(__file__).resolve().parent))
import fuseviews  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=100, help="submissions per submitter")
    p.add_argument("--poll", type=float, default=0.2, help="grader poll interval (the sweep default is 0.2 s)")
    p.add_argument("--concurrent", type=int, default=1, help="submitters at once")
    p.add_argument("--idle", type=float, default=10.0, help="seconds over which the idle grader's CPU is measured")
    p.add_argument(
        "--views", action="store_true", help="also through two FUSE views (grader on one, submitters on the other)"
    )
    args = p.parse_args()
    if args.views and (why := fuseviews.missing()):
        print(why, file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="a2rl-bench-"))
    os.environ.setdefault("A2RL_CACHE", str(tmp / "cache"))
    from a2rl.store.modeldirs import resolve_model

    resolve_model("builtin:tiny-llama")
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    sides = [("local directory", measure(args, tmp / "local", [], []))]
    if args.views:
        with fuseviews.Views() as views:
            sides.append(("two FUSE views", measure(args, views.path, views.enter(0), views.enter(1))))
    print(f"load average after:  {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for name, figures in sides:
        print(f"{name}: {figures.pop('head')}")
        for line in figures.values():
            print(f"  {line}")
    return 0


def measure(args: argparse.Namespace, base: Path, grader_enter: list[str], submitter_enter: list[str]) -> dict:
    """One round in `base`: the grader run under `grader_enter`, the submitters under `submitter_enter` (command
    prefixes: a FUSE view's namespace, or none). The figures as printable lines."""
    import yaml

    from a2rl.scheduling.launcher import open_sweep

    base.mkdir(parents=True, exist_ok=True)
    spec = base / "bench.yaml"
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
    sweep, runs = open_sweep(spec, base / "sd")
    grader = subprocess.Popen(
        [*grader_enter, sys.executable, "-m", "a2rl", "grade", str(sweep.root)],
        stdout=open(base / "grader.log", "w"),
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
                [*submitter_enter, sys.executable, str(FIXTURES / "stress_submitter.py")]
                + [str(sweep.root), run.run_id, str(args.n), str(i)],
                stdout=subprocess.PIPE,
                text=True,
            )
            for i, run in enumerate(runs)
        ]
        with ThreadPoolExecutor(len(procs)) as pool:  # each submission's answer, as its submitter sees it
            trips = sorted(t for ts in pool.map(lambda proc: round_trips(proc, t0), procs) for t in ts)
        wall = time.monotonic() - t0
    finally:
        grader.terminate()
        grader.wait()
    return figures(sweep.ledger.all_entries(), trips, args, wall, idle_cpu)


def figures(entries: list, trips: list[float], args: argparse.Namespace, wall: float, idle_cpu: float) -> dict:
    claimed = sorted(e.claimed_at - e.submitted_at for e in entries)
    recorded = sorted(e.graded_at - e.submitted_at for e in entries)
    grading = sorted(e.eval_seconds for e in entries)

    def q(xs: list[float], f: float) -> float:
        return xs[min(len(xs) - 1, int(f * len(xs)))]

    out = {
        "head": f"{len(entries)} submissions of {args.n * args.concurrent}, {args.concurrent} submitter(s), grader "
        f"poll {args.poll} s, wall {wall:.1f} s ({len(entries) / wall:.1f} submissions/s)"
    }
    rows = (("submit -> claimed", claimed), ("submit -> recorded", recorded), ("evaluation", grading))
    for name, xs in (*rows, ("submitter's answer", trips)):
        out[name] = (
            f"{name:20s} p50 {statistics.median(xs) * 1000:7.1f} ms   p90 {q(xs, 0.9) * 1000:7.1f} ms   "
            f"max {xs[-1] * 1000:7.1f} ms"
        )
    out["idle"] = f"grader idle CPU      {idle_cpu * 100:.2f}% of one core over {args.idle:g} s"
    return out


def round_trips(proc: subprocess.Popen, t0: float) -> list[float]:
    """Seconds from each submission's start (the previous answer, or t0) to its answer in the submitter (its
    stdout line): the recorded score seen through the submitter's own view, plus the freeze and enqueue."""
    out, last = [], t0
    for _ in proc.stdout:
        now = time.monotonic()
        out.append(now - last)
        last = now
    proc.wait()
    return out


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
