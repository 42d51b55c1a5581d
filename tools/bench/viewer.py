"""Speed of the trajectory viewer on a 12-hour run's transcript: a synthetic sweep of one run whose agent.log is
--mb MB of `claude -p --output-format stream-json` (assistant text, Bash calls, outputs of a few bytes to
100 kB), with --subs submissions and their code diffs, then

    page build      write_viewer: parse the transcript, write index.html and its chunk files
    first render    headless Chromium (Debian's `chromium`) opening the page from file://: ms from navigation
                    until the first chunk of turns is in the DOM, as the page itself records it
                    (goal < 2 s); beside it the browser's wall time on the page and on an empty page (its start)

The load average is printed first: the machine may be shared.

    python tools/bench/viewer.py [--mb 50] [--subs 40] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from a2rl.recording.snapshots import snapshot_dir
from a2rl.reporting.viewer import write_viewer
from a2rl.spec.grid import expand
from a2rl.spec.sweep import SweepSpec
from a2rl.store.baselines import BaselineRecord, baseline_path
from a2rl.store.ledger import LedgerEntry
from a2rl.store.results import AgentUsage, RunResult, build_result
from a2rl.store.sweepdir import SweepDir

BUDGET = 12 * 3600.0
GOAL_MS = 2000


def transcript(mb: float, rng: random.Random) -> str:
    """Claude stream-json lines until `mb` MB: a step is a sentence, a Bash call and its output."""
    out, size, step = [], 0, 0
    while size < mb * 1e6:
        n = rng.choice([20, 200, 2000, 8000, 100_000]) if step % 10 else 20
        lines = [f"step {step} epoch {i} loss {rng.random():.4f}" for i in range(max(1, n // 32))]
        events = [
            {"type": "assistant", "message": {"content": [{"type": "text", "text": f"Step {step}: training."}]}},
            {
                "type": "assistant",
                "message": {
                    "content": [
                        {
                            "type": "tool_use",
                            "id": f"c{step}",
                            "name": "Bash",
                            "input": {"command": f"python train.py --step {step}"},
                        }
                    ]
                },
            },
            {
                "type": "user",
                "message": {
                    "content": [{"type": "tool_result", "tool_use_id": f"c{step}", "content": "\n".join(lines)}]
                },
            },
        ]
        text = "".join(json.dumps(e) + "\n" for e in events)
        out.append(text)
        size += len(text)
        step += 1
    out.append(json.dumps({"type": "result", "usage": {"input_tokens": 10**7, "output_tokens": 10**5}}) + "\n")
    return "".join(out)


def build(root: Path, mb: float, subs: int) -> tuple[SweepDir, str]:
    spec = SweepSpec.model_validate(
        {
            "name": "viewer-bench",
            "tasks": ["gsm8k"],
            "agents": ["claude"],
            "drivers": ["model-a"],
            "models": ["builtin:tiny-llama"],
            "seeds": [0],
            "budget": BUDGET,
            "executor": "local",
        }
    )
    sweep = SweepDir(root)
    sweep.create(spec, "", expand(spec))
    (run,) = sweep.runs()
    rng = random.Random(0)
    BaselineRecord(
        task="gsm8k",
        model="tiny-llama",
        model_path="m",
        weights_hash="h",
        protocol="paper",
        evaluator_version=1,
        status="ok",
        score=10.0,
        graded_at=0.0,
    ).sign(sweep.key).dump(baseline_path(sweep, "gsm8k", "tiny-llama", "paper"))
    snaps = snapshot_dir(sweep.root, run.run_id)
    snaps.mkdir(parents=True)
    for seq in range(1, subs + 1):
        at = BUDGET * seq / (subs + 1)
        sweep.ledger.record(
            LedgerEntry(
                submission_id=f"{run.run_id}.{seq:04d}",
                run_id=run.run_id,
                seq=seq,
                submitted_at=at,
                claimed_at=at,
                graded_at=at,
                status="scored",
                score=10 + rng.random() * 50,
                model_path="m",
                task="gsm8k",
                protocol="paper",
                evaluator_version=1,
                grader="g",
                attempt=1,
                budget_used_s=at,
            )
        )
        (snaps / f"{seq:03d}.diff").write_text("".join(f"+line {i} of change {seq}\n" for i in range(200)))
    text = transcript(mb, rng)
    (sweep.run_dir(run.run_id) / "agent.log").write_text(text)
    base = BaselineRecord.load(baseline_path(sweep, "gsm8k", "tiny-llama", "paper"))
    build_result(
        run,
        status="ok",
        entries=sweep.ledger.entries(run.run_id),
        baseline=base,
        submitted=subs,
        failure_reason=None,
        agent_exit_code=0,
        agent_seconds=BUDGET,
        started_at=0.0,
        ended_at=BUDGET,
        usage=AgentUsage(parser="claude", calls=1, input_tokens=10**7, output_tokens=10**5),
    ).sign(sweep.key).dump(sweep.result_path(run.run_id))
    return sweep, run.run_id


def browse(url: str, profile: Path) -> tuple[float, str]:
    t0 = time.perf_counter()
    proc = subprocess.run(
        ["chromium", "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}", "--dump-dom", url],
        capture_output=True,
        text=True,
        timeout=300,
    )
    return time.perf_counter() - t0, proc.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=50)
    ap.add_argument("--subs", type=int, default=40)
    ap.add_argument("--dir", type=Path)
    a = ap.parse_args()
    if shutil.which("chromium") is None:
        raise SystemExit("viewer bench: no chromium (apt-get install chromium)")
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    root = a.dir or Path(tempfile.mkdtemp(prefix="a2rl-viewer-bench-"))
    sweep, run_id = build(root / "sd", a.mb, a.subs)
    log = sweep.run_dir(run_id) / "agent.log"
    result = RunResult.load(sweep.result_path(run_id))
    t0 = time.perf_counter()
    page = write_viewer(sweep, run_id, result)
    build_s = time.perf_counter() - t0
    files = list(page.parent.iterdir())
    print(f"transcript     {log.stat().st_size / 1e6:.1f} MB, {a.subs} submissions")
    print(
        f"page build     {build_s:.2f} s: index.html {page.stat().st_size / 1e3:.0f} kB, "
        f"{sum(f.name.startswith('turns-') for f in files)} chunk files, "
        f"{sum(f.stat().st_size for f in files) / 1e6:.1f} MB in all"
    )
    empty = root / "empty.html"
    empty.write_text("<!DOCTYPE html><html><body>empty</body></html>")
    runs = []
    for i in range(3):
        base_s, _ = browse(f"file://{empty}", root / f"chr{i}")
        wall_s, dom = browse(f"file://{page}", root / f"chr{i}")
        first = re.search(r'data-first-render="(\d+)"', dom)
        turns = len(re.findall(r'<div class="turn k-', dom))
        runs.append((int(first.group(1)) if first else None, wall_s, base_s, turns))
    for first, wall_s, base_s, turns in runs:
        verdict = "no render" if first is None else ("meets" if first < GOAL_MS else "MISSES")
        print(
            f"first render   {first} ms ({turns} turns in the DOM; goal < {GOAL_MS} ms: {verdict}); browser wall "
            f"{wall_s:.2f} s on the viewer, {base_s:.2f} s on an empty page"
        )
    if not a.dir:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()
