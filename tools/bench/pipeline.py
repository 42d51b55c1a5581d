"""Reference pipeline throughput: SFT tokens/s and GRPO rollouts/s with the tiny model on arith's train rows,
through the pipeline's own stages (fp32 on CPU, bf16 on a GPU when CUDA is visible).

    python tools/bench/pipeline.py [--sft-steps 100] [--grpo-steps 20] [--threads 1]

SFT tokens/s counts the prompt and completion tokens of the pairs the stage consumed (steps x batch x mean
tokens per pair) over its wall time; GRPO rollouts/s counts the completions sampled (steps x prompts x
generations) over its wall time, reward and update included. The wall times are the stage records'
(stages.json), so model loading and saving are outside them.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sft-steps", type=int, default=100)
    p.add_argument("--grpo-steps", type=int, default=20)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    opts = p.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(opts.threads)
    os.environ.pop("GRADING_SERVER_URL", None)

    import torch
    from transformers import AutoTokenizer

    from a2rl.reference import pipeline as P
    from a2rl.reference.formats import STATIC_FORMATS
    from a2rl.reference.stages import grpo_stage, sft_stage
    from a2rl.spec.tasks import get_task
    from a2rl.store.modeldirs import resolve_model
    from a2rl.store.stages import StageLog
    from a2rl.tasklib.prepare import ensure_prepared
    from a2rl.tasklib.taskdata import read_jsonl

    torch.set_num_threads(opts.threads)
    model = resolve_model("builtin:tiny-llama")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        rows = read_jsonl(ensure_prepared(get_task("arith"), Path(tmp) / "data").train_dir / "train.jsonl")
        fmt = STATIC_FORMATS["qa_short"].routes["paper"]  # arith: both protocols prompt alike
        args = P.with_defaults(
            P.parse_args(["--sft-steps", str(opts.sft_steps), "--grpo-steps", str(opts.grpo_steps), "--no-schedule"]),
            "static",
            fmt,
        )
        args.schedule = None
        tok = AutoTokenizer.from_pretrained(model)
        pairs = fmt.sft_pairs(rows, tok)
        sft = sft_stage(args, model, pairs, out, max_length=fmt.max_length)
        grpo_stage(args, sft, fmt.grpo_rows(rows, tok), fmt.reward, out)
        stages = {s.name: s for s in StageLog.load(out / "stages.json").stages}
    per_pair = sum(len(tok(q["prompt"] + q["completion"])["input_ids"]) for q in pairs) / len(pairs)
    sft_tokens = stages["sft"].steps * args.sft_batch_size * per_pair
    rollouts = stages["grpo"].steps * args.grpo_prompts * args.num_generations
    where = (
        f"GPU ({torch.cuda.get_device_name(0)}), bf16"
        if torch.cuda.is_available()
        else f"CPU, fp32, {opts.threads} thread(s)"
    )
    print(f"device: {where}; tiny model, arith rows")
    print(
        f"SFT:  {stages['sft'].steps} steps x {args.sft_batch_size} pairs ({per_pair:.1f} tokens each) in "
        f"{stages['sft'].wall_s:.1f} s: {sft_tokens / stages['sft'].wall_s:,.0f} tokens/s"
    )
    print(
        f"GRPO: {stages['grpo'].steps} steps x {args.grpo_prompts} prompts x {args.num_generations} generations in "
        f"{stages['grpo'].wall_s:.1f} s: {rollouts / stages['grpo'].wall_s:,.1f} rollouts/s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
