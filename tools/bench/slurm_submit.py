"""Time to submit a large sweep to Slurm: the launcher's submit step for an N-run grid (default 1,000), as job
arrays split at MaxArraySize, on the local cluster (tools/slurm/up.sh). Jobs are held (`begin: now+1hour`)
and cancelled afterwards, so nothing runs.

    python tools/bench/slurm_submit.py [--runs 1000] [--max-array 300]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=1000)
    p.add_argument("--max-array", type=int, default=None, help="a cluster profile's MaxArraySize (default: scontrol's)")
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="a2rl-bench-"))
    os.environ.setdefault("A2RL_CACHE", str(tmp / "cache"))
    import yaml

    (tmp / "clusters").mkdir()
    (tmp / "clusters" / "bench.yaml").write_text(
        yaml.safe_dump({"name": "bench", "partition": "debug", "max_array_size": args.max_array})
    )
    os.environ["A2RL_CLUSTERS_PATH"] = str(tmp / "clusters")
    from a2rl.scheduling.launcher import Launcher, open_sweep

    spec = tmp / "bench.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "name": "bench",
                "tasks": ["echo"],
                "agents": ["baseline"],
                "models": ["builtin:tiny-llama"],
                "seeds": list(range(args.runs)),
                "budget": 600,
                "executor": "slurm",
                "cluster": "bench",
                "task_paths": [str(REPO / "tests" / "fixtures" / "tasks")],
                "resources": {"mem_gb": 0.1, "sbatch": {"begin": "now+1hour"}},
            }
        )
    )
    t0 = time.monotonic()
    sweep, runs = open_sweep(spec, tmp / "sd")
    t1 = time.monotonic()
    launcher = Launcher(sweep, "slurm")
    launcher.prepare()
    t2 = time.monotonic()
    launcher.submit(runs)
    t3 = time.monotonic()
    arrays = Counter(j.split("_")[0] for j in launcher.jobs.values())
    launcher.scheduler.cancel([*arrays, *launcher.grader_jobs])
    print(
        f"{len(runs)} runs: validate + freeze {t1 - t0:.1f} s, prepare {t2 - t1:.1f} s, "
        f"submit {t3 - t2:.1f} s ({(t3 - t2) / len(runs) * 1000:.1f} ms/run) as {len(arrays)} arrays "
        f"of {sorted(arrays.values(), reverse=True)} + {len(launcher.grader_jobs)} grader job"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
