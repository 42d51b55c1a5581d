"""Lineage check (a2rl/grading/lineage.py): its speed per GB of submitted weights, and its calibration.

Speed: writes a base model and a submission of --gb GB each (bf16 safetensors shards of Llama-shaped matrices; the
submission is the base plus 1% noise, so every tensor is streamed and compared), then times lineage() with the
files evicted from the page cache (posix_fadvise DONTNEED: read from disk) and again with them cached, and
extrapolates to a 7B bf16 submission (7e9 parameters x 2 bytes = 14 GB, compared with a base of the same size).

Calibration (--calibrate DIR): trains with the reference pipeline (a2rl.reference.pipeline) on arith's train rows
on this CPU: full SFT for each of --steps, full SFT of the first --steps then --grpo-steps of GRPO (the pipeline's
reward), LoRA (r 16) SFT, and the same full SFT from a tiny model of the same shape
initialised with seed 1; then prints each model's lineage figures against the tiny base, the smallest cosine of a
derived model's matrix and the largest of the foreign ones, beside the verdict threshold (COSINE_MIN), and counts
wrong verdicts of the full comparison and of the grader's one-pass sample (grading/onepass.py), the sample as the
freeze's one read takes it (each model frozen with a key: run/onecopy.py, grading/frozenscan.py; a content hash
other than weights_hash's counts as wrong too). A run whose output already holds a model in DIR is not trained
again.

    .venv/bin/python tools/bench/lineage.py [--gb 1] [--calibrate DIR --steps 150,700 --grpo-steps 150]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from safetensors.torch import save_file

ROOT = Path(__file__).resolve().parents[2]
SEVEN_B_GB = 7e9 * 2 / 1e9


def write_pair(dest: Path, gb: float) -> tuple[Path, Path]:
    """Base and submission directories of `gb` GB each: shards of 4096 x 4096 bf16 matrices."""
    from a2rl.store.modeldirs import resolve_model

    tiny = resolve_model("builtin:tiny-llama")
    base, sub = dest / "base", dest / "sub"
    matrices = max(1, round(gb * 1e9 / (4096 * 4096 * 2)))
    g = torch.Generator().manual_seed(0)
    for d in (base, sub):
        d.mkdir()
        for f in tiny.iterdir():
            if f.name.startswith("tokenizer") or f.name == "config.json":
                shutil.copy(f, d / f.name)
    per_shard = 16  # 512 MB shards
    for shard in range(0, matrices, per_shard):
        b = {
            f"model.layers.{i}.mlp.up_proj.weight": (torch.randn(4096, 4096, generator=g) * 0.02).bfloat16()
            for i in range(shard, min(shard + per_shard, matrices))
        }
        s = {k: (v.float() + 0.0002 * torch.randn(v.shape, generator=g)).bfloat16() for k, v in b.items()}
        save_file(b, base / f"model-{shard:05d}.safetensors", metadata={"format": "pt"})
        save_file(s, sub / f"model-{shard:05d}.safetensors", metadata={"format": "pt"})
    return base, sub


def evict(*dirs: Path) -> None:
    for d in dirs:
        for f in d.glob("*.safetensors"):
            fd = os.open(f, os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def speed(gb: float) -> None:
    from a2rl.grading.lineage import lineage
    from a2rl.weights import safetensors_index

    with tempfile.TemporaryDirectory(prefix="a2rl-lineage-bench-") as tmp:
        base, sub = write_pair(Path(tmp), gb)
        size = sum(f.stat().st_size for f in sub.glob("*.safetensors")) / 1e9
        lineage(base, base)  # imports (torch, transformers, tokenizers) out of the timing
        print(
            f"lineage of a {size:.2f} GB bf16 submission ({len(safetensors_index(sub))} tensors) against a base of "
            f"the same size, {platform.processor() or platform.machine()}, {os.cpu_count()} CPU(s), "
            f"{torch.get_num_threads()} torch thread(s)"
        )
        for label, cold in (("from disk (evicted from the page cache)", True), ("page cache warm", False)):
            if cold:
                evict(base, sub)
            t0, c0 = time.perf_counter(), time.process_time()
            found = lineage(sub, base)
            s, cpu = time.perf_counter() - t0, time.process_time() - c0
            assert found.verdict == "derived", found
            print(
                f"  {label}: {s:.2f} s wall ({cpu:.2f} s CPU, load average {os.getloadavg()[0]:.1f}), "
                f"{s / size:.2f} s per GB of submitted weights; a 7B bf16 submission ({SEVEN_B_GB:.0f} GB): "
                f"~{s / size * SEVEN_B_GB:.0f} s"
            )


def train(out: Path, model: Path, data: Path, *args: str, stage: str = "sft") -> Path:
    """The reference pipeline's model of `stage` (its last) trained into `out`, unless it is there already."""
    if not (out / stage / "model.safetensors").exists():
        env = dict(os.environ, MODEL_PATH=str(model), DATA_PATH=str(data), OUTPUT_DIR=str(out))
        env.pop("GRADING_SERVER_URL", None)
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "a2rl.reference.pipeline", "--train-format", "qa_short", "--no-schedule", *args],
            env=env,
            capture_output=True,
            text=True,
        )
        if proc.returncode:
            raise SystemExit(f"training {out.name} failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
        print(f"  trained {out.name} in {time.perf_counter() - t0:.0f} s", flush=True)
    return out / stage


def frozen_scan(model: Path, submissions: Path):
    """The grader's hash and samples of `model` as the freeze's copy computes them (its frozen copy deleted)."""
    from a2rl.grading.frozenscan import take_scan
    from a2rl.run.artifacts import Limits, check_artifact, freeze

    key = os.urandom(32)
    with check_artifact(model, model.parent, Limits(64, 1 << 40, 1 << 40)) as artifact:
        dest = freeze(artifact, submissions / model.parent.name, key)
    taken = take_scan(dest, key, None)
    shutil.rmtree(dest)
    if taken is None:
        raise SystemExit(f"the freeze's scan of {model} did not verify")
    return taken[1]


def calibrate(runs: Path, steps: list[int], grpo: int) -> None:
    from a2rl.grading.lineage import COSINE_MIN, lineage, tensor_distances
    from a2rl.grading.onepass import SAMPLE, one_pass_lineage
    from a2rl.grading.profiles import base_profile
    from a2rl.spec.tasks import get_task
    from a2rl.store.modeldirs import resolve_model
    from a2rl.store.tinymodel import build_tiny_model
    from a2rl.tasklib.prepare import ensure_prepared
    from a2rl.weights import weights_hash

    base = resolve_model("builtin:tiny-llama")
    other = build_tiny_model(runs / "seed1", seed=1)
    data = ensure_prepared(get_task("arith"), runs / "data").train_dir
    derived, foreign = {}, {}
    for n in steps:
        derived[f"full SFT {n} steps"] = train(
            runs / f"full{n}", base, data, "--sft-steps", str(n), "--grpo-steps", "0"
        )
        foreign[f"seed 1, full SFT {n} steps"] = train(
            runs / f"seed1_{n}", other, data, "--sft-steps", str(n), "--grpo-steps", "0"
        )
    derived[f"LoRA r16 SFT {steps[0]} steps, merged"] = train(
        runs / f"lora{steps[0]}", base, data, "--sft-steps", str(steps[0]), "--grpo-steps", "0", "--lora-r", "16"
    )
    if grpo:
        derived[f"full SFT {steps[0]} + GRPO {grpo} steps"] = train(
            runs / f"grpo{steps[0]}_{grpo}",
            base,
            data,
            "--sft-steps",
            str(steps[0]),
            "--grpo-steps",
            str(grpo),
            stage="grpo",
        )
    foreign["seed 1, untrained"] = other
    print(f"lineage against the tiny base ({base}); verdict threshold COSINE_MIN = {COSINE_MIN}")
    profile = base_profile(base).samples
    lows, highs, wrong = [], [], []
    for group, models in (("from the base", derived), ("foreign", foreign)):
        for label, model in models.items():
            found = lineage(model, base)
            scanned = frozen_scan(model, runs / "submissions")
            sampled = one_pass_lineage(model, base, scanned, profile)  # what the grader computes
            if scanned.digest != weights_hash(model):
                wrong.append(f"{label}: the freeze's content hash is not weights_hash's")
            if sampled.verdict != found.verdict or found.verdict != (
                "derived" if group == "from the base" else "foreign"
            ):
                wrong.append(f"{label}: full {found.verdict}, one-pass {sampled.verdict}")
            distances, sizes, _ = tensor_distances(model, base)
            cosines = [d.cosine for d in distances if sizes[d.name][1] >= 2]  # the matrices, which vote
            (lows if group == "from the base" else highs).append(
                min(cosines) if group == "from the base" else max(cosines)
            )
            print(
                f"  {group:13} {label:32} {found.verdict:8} close share {found.close_share:.2f}, cosine min "
                f"{min(cosines):+.3f} median {found.cosine_median:+.3f} max {max(cosines):+.3f}, relative L2 median "
                f"{found.rel_l2_median:.3f} max {found.rel_l2_max:.3f}; lowest: "
                + ", ".join(f"{d.name.removeprefix('model.')} {d.cosine:+.3f}" for d in found.farthest[:2])
            )
    print(f"smallest cosine of a matrix of a model from the base: {min(lows):+.3f}")
    print(f"largest cosine of a matrix of a foreign model: {max(highs):+.3f}")
    n = len(derived) + len(foreign)
    print(f"wrong verdicts (full comparison or one-pass sample of {SAMPLE} elements per tensor): {len(wrong)} of {n}")
    for w in wrong:
        print(f"  {w}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gb", type=float, default=1.0, help="size of the submission (and of the base)")
    p.add_argument("--calibrate", type=Path, metavar="DIR", help="train and compare the calibration models in DIR")
    p.add_argument("--steps", default="150,700", help="full SFT steps of the calibration runs")
    p.add_argument("--grpo-steps", type=int, default=150, help="GRPO steps after the first SFT run's (0: none)")
    args = p.parse_args()
    sys.path.insert(0, str(ROOT))
    speed(args.gb)
    if args.calibrate:
        calibrate(args.calibrate, [int(s) for s in args.steps.split(",")], args.grpo_steps)


if __name__ == "__main__":
    main()
