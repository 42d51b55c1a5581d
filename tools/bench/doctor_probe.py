"""What the sweep directory's file-system check (a2rl/scheduling/fscheck.py) adds to a launch, on the local
Slurm cluster (tools/slurm/up.sh): the first launch's check (one probe job on the partition: queued, started, its
report seen), against a relaunch's (the verdict kept in fscheck.json) and the local executor's (no job), each
`--repeat` times in one run. The sweep directory is on this machine's disk, seen at once by both nodes.

    python tools/bench/doctor_probe.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="a2rl-bench-doctor-"))
    os.environ.setdefault("A2RL_CACHE", str(tmp / "cache"))
    import yaml

    from a2rl.scheduling.fscheck import check, checked
    from a2rl.spec.sweep import load_sweep

    spec_path = tmp / "bench.yaml"
    spec_path.write_text(
        yaml.safe_dump(
            {
                "name": "bench-doctor",
                "tasks": ["echo"],
                "agents": ["baseline"],
                "models": ["builtin:tiny-llama"],
                "budget": 60,
                "executor": "slurm",
                "cluster": "local",
                "isolation": "none",
                "task_paths": [str(REPO / "tests" / "fixtures" / "tasks")],
                "agent_paths": [str(REPO / "tests" / "fixtures" / "agents")],
            }
        )
    )
    spec = load_sweep(spec_path)
    times: dict[str, list[float]] = {"probe job (first launch)": [], "kept verdict (relaunch)": [], "local": []}
    try:
        for i in range(args.repeat):
            d = tmp / f"sd{i}"
            d.mkdir()
            t = time.perf_counter()
            v = check(d, spec, "slurm", d / "jobs")
            times["probe job (first launch)"].append(time.perf_counter() - t)
            assert v.refused is None, v.refused
            t = time.perf_counter()
            assert checked(d, spec, "slurm", d / "jobs")[1]
            times["kept verdict (relaunch)"].append(time.perf_counter() - t)
            t = time.perf_counter()
            check(d, spec, "local", d / "jobs")
            times["local"].append(time.perf_counter() - t)
        print(f"the file-system check on a launch, {args.repeat} times (seconds; node {v.node}, lag {v.lag_s} s):")
        for name, xs in times.items():
            print(f"  {name:26s} median {statistics.median(xs):7.3f}  min {min(xs):7.3f}  max {max(xs):7.3f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
