"""Grading speed: for one submission, the grader's wall time divided by the raw generation time of the same backend on
the same prompts (the overhead ratio; goal <= 1.3), the model's load time, and submissions graded per minute over a
series of submissions of one architecture (weights reloaded into one engine).

The model is built locally: the tiny model's tokenizer with a ~100M-parameter Llama body (random weights: the
figures are about the machinery, not the scores). The task is arith's held-out split, its first --prompts
prompts (default 40, so that the series finishes in minutes on a 2-core CPU; 200 is the whole split). "Grader wall
time" is what the daemon does per submission besides the queue and the ledger: the weights hash, the engine
(reload or load) and the evaluator.

    .venv/bin/python tools/bench/grading.py [--backend transformers|vllm|auto] [--submissions 10] [--prompts 200]
                                            [--gpus N] [--layers 14 --hidden 768]
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import tempfile
import time
from pathlib import Path

import torch


def build_model(dest: Path, layers: int, hidden: int) -> Path:
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from a2rl.spec.tinymodel import build_tiny_model

    tiny = build_tiny_model(dest.parent / "tiny")
    tok = AutoTokenizer.from_pretrained(tiny)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=hidden, intermediate_size=hidden * 8 // 3,
                         num_hidden_layers=layers, num_attention_heads=hidden // 64, num_key_value_heads=hidden // 64,
                         max_position_embeddings=512, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id, tie_word_embeddings=True)
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(dest, safe_serialization=True)
    tok.save_pretrained(dest)
    return dest


def variant(base: Path, dest: Path, i: int) -> Path:
    """Same architecture, other weights (one tensor scaled)."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(base, dest)
    f = next(dest.glob("*.safetensors"))
    tensors = load_file(str(f))
    name = sorted(tensors)[-1]
    tensors[name] = tensors[name] * (1 + 0.01 * (i + 1))
    save_file(tensors, str(f), metadata={"format": "pt"})
    return dest


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", default="transformers", choices=["auto", "transformers", "vllm"])
    p.add_argument("--gpus", type=int, default=None, help="default: every visible GPU")
    p.add_argument("--submissions", type=int, default=10)
    p.add_argument("--prompts", type=int, default=40, help="held-out prompts per submission (arith has 200)")
    p.add_argument("--layers", type=int, default=14)
    p.add_argument("--hidden", type=int, default=768)
    args = p.parse_args()

    from a2rl.llm.backends import Engine, resolve_settings, visible_gpus
    from a2rl.grading.daemon import evaluate_model
    from a2rl.spec.generation import get_preset
    from a2rl.weights import parameter_count, weights_hash
    from a2rl.spec.sweep import GraderSettings
    from a2rl.spec.tasks import get_task

    work = Path(tempfile.mkdtemp(prefix="a2rl-bench-grading-"))
    try:
        base = build_model(work / "base", args.layers, args.hidden)
        task = get_task("arith")
        data_root = work / "data"
        task.ensure_prepared(data_root)
        gpus = visible_gpus() if args.gpus is None else args.gpus
        settings = resolve_settings(GraderSettings(backend=args.backend, gpus=gpus))
        preset = get_preset()
        where = torch.cuda.get_device_name(0) if settings.device == "cuda" else \
            f"CPU ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"
        print(f"model: {parameter_count(base) / 1e6:.0f}M parameters; backend {settings.backend} on {where}")

        engine = Engine(settings)
        t0 = time.perf_counter()
        generator = engine.get(base, base, preset)
        load_s = time.perf_counter() - t0
        print(f"model load (cold engine): {load_s:.2f} s", flush=True)

        def grade(model_dir: Path) -> float:
            t = time.perf_counter()
            weights_hash(model_dir)
            evaluate_model(task, model_dir, base, data_root=data_root, engine=engine, preset=preset,
                           options={"limit": args.prompts})
            return time.perf_counter() - t

        grade(variant(base, work / "warm", 99))  # warm-up: first-call costs are not per submission
        one = grade(variant(base, work / "one", 98))
        heldout = task.data(data_root).heldout_dir / "test.jsonl"
        prompts = [json.loads(line)["prompt"] for line in heldout.read_text().splitlines() if line][:args.prompts]
        opts = task.spec.eval
        t = time.perf_counter()
        generator.generate(prompts, max_new_tokens=int(opts.get("max_new_tokens", 8)),
                           batch_size=int(opts.get("batch_size", 100)), stop="\n")
        raw = time.perf_counter() - t
        print(f"one submission: grader {one:.2f} s, raw generation {raw:.2f} s, overhead ratio {one / raw:.2f}"
              f" (goal <= 1.3)", flush=True)
        models = [variant(base, work / f"s{i}", i) for i in range(args.submissions)]
        t = time.perf_counter()
        for m in models:
            grade(m)
        series = time.perf_counter() - t
        print(f"{args.submissions} submissions of one architecture: {series:.1f} s, "
              f"{60 * args.submissions / series:.1f} graded per minute (engine starts {engine.starts}, "
              f"weight reloads {engine.reloads})")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
