"""Speed of the analyses on a big sweep: a synthetic sweep directory of --runs runs (records only: signed results
holding each submission's score, budget time and tokens, and run-report metrics; no jobs), then

    all tables  every table kind of issue 14: `a2rl aggregate --layout paper --by mode --pass-at 1,3,5 --scaling
                --routes --failures --usage --submissions` (goal ≤ 3 s for 10,000 runs)
    the report  `a2rl report` (goal ≤ 30 s for 10,000 runs)

each timed twice and printed with whether it meets its goal: in this process (imports excluded), and as the
command a user runs (a new interpreter: imports included; its verdict is the goal's). CPU seconds include the
report's plotting worker processes. The load average is printed first: the machine may be shared.

    python tools/bench/aggregate.py [--runs 10000] [--seeds 25] [--dir DIR]   (an existing DIR is reused)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from a2rl.records import Record
from a2rl.reporting.aggregate import Sweeps, format_tables, tables
from a2rl.reporting.html import write_report
from a2rl.reporting.metrics import RunMetrics
from a2rl.spec.grid import expand
from a2rl.spec.sweep import SweepSpec
from a2rl.store.baselines import BaselineRecord, baseline_path
from a2rl.store.ledger import LedgerEntry
from a2rl.store.results import AgentUsage, build_result
from a2rl.store.sweepdir import SweepDir

TASKS = ["alfworld", "alpacaeval", "deepsearchqa", "gsm8k", "humaneval"]
AGENTS = ["claude", "codex", "gemini", "opencode"]
DRIVERS = ["model-a", "model-b"]
MODES = ["free", "sft-only"]
BUDGET = 36000.0


def fast_dump(rec: Record, path: Path) -> None:
    """Record.dump without the fsync: generating the fixture is not what is measured."""
    data = rec.model_dump(mode="json")
    data["schema_version"] = rec.SCHEMA
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def build(root: Path, runs: int, seeds: int) -> SweepDir:
    models = [f"m{i}" for i in range(max(1, runs // (len(TASKS) * len(AGENTS) * len(DRIVERS) * len(MODES) * seeds)))]
    spec = SweepSpec.model_validate(
        {
            "name": "bench",
            "tasks": TASKS,
            "agents": AGENTS,
            "drivers": DRIVERS,
            "modes": MODES,
            "models": [{"name": m, "path": f"/models/{m}"} for m in models],
            "seeds": list(range(seeds)),
            "budget": BUDGET,
            "executor": "local",
        }
    )
    sweep = SweepDir(root)
    sweep.create(spec, "", expand(spec))
    rng = random.Random(0)
    bases = {}
    for task in TASKS:
        for m in models:
            bases[task, m] = BaselineRecord(
                task=task,
                model=m,
                model_path=f"/models/{m}",
                weights_hash="h",
                protocol="paper",
                evaluator_version=1,
                status="ok",
                score=rng.uniform(5, 40),
                graded_at=0.0,
            ).sign(sweep.key)
            fast_dump(bases[task, m], baseline_path(sweep, task, m, "paper"))
    for run in sweep.runs():
        entries = []
        tokens = 0
        for seq in range(1, rng.randint(0, 5) + 1):
            tokens += rng.randint(10_000, 400_000)
            valid = rng.random() < 0.8
            e = LedgerEntry(
                submission_id=f"{run.run_id}.{seq:04d}",
                run_id=run.run_id,
                seq=seq,
                submitted_at=seq,
                claimed_at=seq,
                graded_at=seq,
                status="scored" if valid else "invalid",
                score=rng.uniform(0, 80) if valid else None,
                model_path="m",
                task=run.task,
                protocol=run.protocol,
                evaluator_version=1,
                grader="g",
                attempt=1,
                budget_used_s=BUDGET * seq / 6,
                tokens=tokens,
                cost_usd=tokens * 3e-6,
            )
            entries.append(e)  # into the result only: the tables read no ledger entry
        status = "failed" if rng.random() < 0.05 else "ok"
        result = build_result(
            run,
            status=status,
            entries=entries,
            baseline=bases[run.task, run.model.name],
            submitted=len(entries),
            failure_reason=None,
            agent_exit_code=0,
            agent_seconds=BUDGET,
            started_at=0.0,
            ended_at=BUDGET,
            usage=AgentUsage(parser="claude", input_tokens=tokens, output_tokens=tokens // 10, cost_usd=tokens * 3e-6),
        )
        fast_dump(result.sign(sweep.key), sweep.result_path(run.run_id))
        fast_dump(
            RunMetrics(
                run_id=run.run_id,
                task=run.task,
                agent=run.agent.key,
                driver=run.driver,
                mode=run.mode,
                model=run.model.name,
                protocol=run.protocol,
                seed=run.seed,
                status=status,
                baseline=result.baseline,
                best=result.best,
                improvement=result.improvement,
                submissions=len(entries),
                valid_submission_rate=None,
                first_valid_idx=None,
                time_to_first_improvement=None,
                time_to_best=None,
                monotonic_ratio=None,
                copy_model_count=0,
                time_used_ratio=1.0,
                last_submit_gap=None,
                score_trajectory=[],
                input_tokens=None,
                output_tokens=None,
                cost_usd=None,
                cpu_seconds=None,
                train_type=rng.choice(["SFT", "SFT+GRPO", "GRPO"]),
                train_types_seen=[],
                failure_type=None,
                failure_source=rng.choice([None, "agent"]),
                code_snapshots=0,
            ),
            sweep.run_dir(run.run_id) / "report" / "metrics.json",
        )
    return sweep


AGGREGATE_GOAL_S, REPORT_GOAL_S = 3.0, 30.0
ALL_TABLES = [
    "--layout",
    "paper",
    "--by",
    "mode",
    "--pass-at",
    "1,3,5",
    "--scaling",
    "--routes",
    "--failures",
    "--usage",
    "--submissions",
]


def cpu_s() -> float:
    """CPU seconds of this process and its waited-for children (the command, the report's plot workers)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def clocked(fn) -> tuple[float, float]:
    t, cpu = time.perf_counter(), cpu_s()
    fn()
    return time.perf_counter() - t, cpu_s() - cpu


def command(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "a2rl", *args], check=True, stdout=subprocess.DEVNULL)


def all_tables(sweep: SweepDir) -> str:
    sw = Sweeps([sweep])
    return format_tables(
        sw,
        tables(
            sw,
            layout="paper",
            by="mode",
            pass_at=[1, 3, 5],
            scaling=True,
            routes=True,
            failures=True,
            usage=True,
            submissions=True,
        ),
        "simple",
    )


def verdict(what: str, wall: float, cpu: float, goal: float, n: int) -> None:
    verdict = "meets" if wall <= goal else "MISSES"
    print(f"{what}: {wall:.2f} s ({cpu:.2f} s CPU) for {n} runs; {verdict} the goal of ≤ {goal:g} s", flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=10_000)
    p.add_argument("--seeds", type=int, default=25)
    p.add_argument("--dir", type=Path, help="where to build the sweep (default: a temporary directory)")
    args = p.parse_args()
    root = args.dir or Path(tempfile.mkdtemp(prefix="a2rl-bench-agg-")) / "sd"
    t = time.perf_counter()
    sweep = SweepDir(root)
    if not sweep.exists():
        sweep = build(root, args.runs, args.seeds)
    n = len(sweep.runs())
    print(
        f"{n} runs in {root} ({time.perf_counter() - t:.1f} s to build or open); load average "
        f"{' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs",
        flush=True,
    )

    agg_s, agg_cpu = clocked(lambda: all_tables(sweep))
    verdict("aggregate, all tables, in-process", agg_s, agg_cpu, AGGREGATE_GOAL_S, n)
    agg_s, agg_cpu = clocked(lambda: command("aggregate", str(root), *ALL_TABLES))
    verdict(f"`a2rl aggregate {' '.join(ALL_TABLES)}`", agg_s, agg_cpu, AGGREGATE_GOAL_S, n)

    rep_s, rep_cpu = clocked(lambda: write_report(Sweeps([sweep]), root / "report"))
    verdict("report, in-process", rep_s, rep_cpu, REPORT_GOAL_S, n)
    rep_s, rep_cpu = clocked(lambda: command("report", str(root)))
    verdict("`a2rl report`", rep_s, rep_cpu, REPORT_GOAL_S, n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
