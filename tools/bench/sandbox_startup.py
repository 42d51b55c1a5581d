"""Sandbox start-up overhead per agent start: the same command plain and through the run's sandbox (bwrap, with
and without the network relays), N times each; prints medians and the overhead. Goal: <= 1 s.

    python tools/bench/sandbox_startup.py [-n 20]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from a2rl.run.isolation import choose
from a2rl.run.sandbox import AgentSandbox
from a2rl.spec.sweep import default_agent_python


def median_s(argv: list[str], n: int, cwd: Path) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run(argv, cwd=cwd, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("-n", type=int, default=20)
    args = p.parse_args()
    python = default_agent_python()
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp)
        for name, argv in (("true", ["/usr/bin/true"]), ("python -c pass", [str(python), "-c", "pass"])):
            plain = median_s(argv, args.n, ws)
            print(f"{name:16s} plain {plain * 1000:7.1f} ms")
            for network in ("full", "api"):
                with AgentSandbox(choose("bwrap"), network, forwards=[("127.0.0.1", 40009)], allow_hosts=[]) as box:
                    wrapped = box.command(argv, workspace=ws, python=python, read_only=[], cwd=ws)
                    boxed = median_s(wrapped, args.n, ws)
                print(
                    f"{name:16s} bwrap network={network:4s} {boxed * 1000:7.1f} ms  "
                    f"overhead {(boxed - plain) * 1000:7.1f} ms (median of {args.n})"
                )


if __name__ == "__main__":
    main()
