"""The grading time `feedback: split` adds per run, both sides in one run: arith's evaluation of one model on all
its held-out items (what the paper's way scores each submission on), on the feedback part (what each submission is
scored on under `feedback: split`) and on the final part (the one extra evaluation per run, after it; the base
model gets one more per sweep). The engine is started once and warmed up, as a grader's is; each figure is the
median of --reps evaluations. The model is built locally (tools/bench/grading.py's: the tiny model's tokenizer
with a Llama body of --layers x --hidden, random weights: the figures are about the machinery, not the scores).

    .venv/bin/python tools/bench/final_split.py [--layers 4 --hidden 256] [--reps 5] [--submissions 5]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from grading import build_model  # noqa: E402

from a2rl.grading.daemon import evaluate_model  # noqa: E402
from a2rl.llm.backends import CPU_SETTINGS, Engine  # noqa: E402
from a2rl.spec.tasks import get_task  # noqa: E402
from a2rl.tasklib.prepare import ensure_prepared


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--submissions", type=int, default=5, help="submissions per run, for the per-run totals")
    args = p.parse_args()
    task = get_task("arith")
    with tempfile.TemporaryDirectory() as tmp:
        model = build_model(Path(tmp) / "model", args.layers, args.hidden)
        data_root = Path(tmp) / "data"
        ensure_prepared(task, data_root)
        engine = Engine(CPU_SETTINGS)

        def seconds(part: str) -> float:
            t0 = time.perf_counter()
            evaluate_model(task, model, model, data_root=data_root, protocol="a2rl", engine=engine, part=part)
            return time.perf_counter() - t0

        seconds("feedback")  # the engine's cold start, which a grader pays once
        parts = ("heldout", "feedback", "final")
        runs = [[seconds(part) for part in parts] for _ in range(args.reps)]  # interleaved: a busy machine's drift
        t = {part: statistics.median(r[i] for r in runs) for i, part in enumerate(parts)}
    split = task.spec.split
    n = args.submissions
    print(f"{platform.processor() or platform.machine()}, transformers on CPU, {args.layers}x{args.hidden} Llama")
    print(f"arith, one evaluation (median of {args.reps}):")
    print(f"  all held-out items (200):      {t['heldout']:.3f} s   (each submission, paper's way)")
    print(f"  feedback part ({split.feedback}):          {t['feedback']:.3f} s   (each submission, feedback: split)")
    print(f"  final part ({split.final}):             {t['final']:.3f} s   (once per run, after it; +1 per sweep)")
    paper, ours = n * t["heldout"], n * t["feedback"] + t["final"]
    print(f"a run of {n} submissions: {paper:.3f} s of grading the paper's way, {ours:.3f} s under feedback: split")
    share = t["final"] / (n * t["feedback"])
    print(f"extra grading time of the final scoring: {t['final']:.3f} s per run ({share:.0%} of its feedback grading)")


if __name__ == "__main__":
    main()
