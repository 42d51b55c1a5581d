"""One real submission of a paper-size checkpoint through a2rl's grader path, against one plain copy of its files.

    .venv/bin/python tools/bench/submission_path.py --params 7.6e9 [--dir /tmp/x] [--path onecopy|onepass|today|both]

Writes a Qwen2.5-7B-shaped base and a "trained" submission (tools/bench/bigmodel.py: the base plus noise on every
tensor) into --dir, then on the same disk (a copy, the path, a copy again: R divides by the copies' mean):
  cp        one plain `cp -r` of the submission's files, page cache dropped first (echo 3 > /proc/sys/vm/drop_caches;
            without root it says so and times a warm copy), to a directory deleted right after;
  the path  the real code, page cache dropped again: check (run/artifacts.check_artifact: type, size, headers),
            freeze (run/artifacts.freeze: O_NOFOLLOW descriptors, exactly the checked sizes), the grader's check
            of the frozen copy (grading/trust.check_frozen), then
              onecopy (default): the freeze reads each file once into user space, writes the copy and feeds the
                       content hash, the lineage samples and the canary search from the same buffers
                       (run/onecopy.py, with a random sweep key and arith's canary); the grader verifies the signed
                       result (grading/frozenscan.take_scan), scans only the files under 16 MiB for leaks and
                       judges lineage from the samples
              and for the others the leak scan (tasklib/leaks.scan_files, arith's held-out markers), then
              today:   content hash (weights.weights_hash), lineage (grading/lineage.lineage: every element of the
                       submission and of the base, in float32)
              onepass: content hash and lineage from one streamed read of the frozen copy
                       (grading/onepass.stream, then one_pass_lineage against the base's profile)
            the grading-cache lookup (its key: grading/daemon.grading_key on llm/backends.engine_key), and the
            engine's load on this CPU (transformers from_pretrained of the frozen copy in bf16: the CPU engine's
            fp32 would need 2x the memory; skipped, and said, when the machine's free memory cannot hold it).
With --other-variants (and a one-pass path) it then prints the one-pass verdicts of the lora and foreign
variants, each written in the submission's place. Last line: `fixed-cost ratio R` = (the path's seconds, no
generation) / (the plain copy's seconds).

Disk: the submission, the base and the frozen copy are each full size. With --path onecopy or onepass the base's profile
is made first (once per sweep in the grader: printed apart, not in R) and the base's weight files are then made
sparse (their headers kept, for the architecture check), so at most two full-size copies are on disk at once.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools" / "bench"))

import bigmodel  # noqa: E402


def drop_caches() -> str:
    """Write dirty pages back and drop the page cache; what happened, in words."""
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return "page cache dropped"
    except OSError as e:
        return f"page cache NOT dropped ({e.strerror}: not root?)"


def gb(d: Path) -> float:
    return sum(f.stat().st_size for f in d.iterdir() if f.is_file()) / 1e9


def plain_copy(src: Path, dest: Path) -> float:
    print(f"  cp: {drop_caches()}", flush=True)
    t0 = time.perf_counter()
    subprocess.run(["cp", "-r", str(src), str(dest)], check=True)
    s = time.perf_counter() - t0
    shutil.rmtree(dest)
    return s


def sparse_weights(base: Path) -> None:
    """Replace the base's shards by sparse files holding only their headers: their index (names, shapes) stays
    readable, their bytes take no disk (the one-pass path reads the base's profile instead)."""
    for f in base.glob("*.safetensors"):
        with open(f, "rb") as fh:
            n = int.from_bytes(fh.read(8), "little")
            head = fh.read(n)
        size = f.stat().st_size
        f.unlink()
        with open(f, "wb") as fh:
            fh.write(n.to_bytes(8, "little") + head)
            fh.truncate(size)


class Stages:
    def __init__(self) -> None:
        self.times: dict[str, float] = {}

    def __call__(self, name: str, fn, *args):
        t0 = time.perf_counter()
        out = fn(*args)
        self.times[name] = time.perf_counter() - t0
        print(f"    {name:28} {self.times[name]:8.2f} s", flush=True)
        return out


def grading_key_of(digest: str, frozen: Path, base: Path, task) -> str:
    from a2rl.grading.evaluate import grading_key
    from a2rl.llm.backends import BackendSettings, engine_key
    from a2rl.spec.generation import get_preset

    settings = BackendSettings("transformers", "cpu", 0, 0.9, None, None)
    return grading_key(digest, engine_key(frozen, base), task, "a2rl", settings, get_preset("greedy"), None)


def engine_load(frozen: Path) -> str:
    import torch
    from transformers import AutoModelForCausalLM

    need = bigmodel_bytes(frozen) * 1.1
    meminfo = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    avail = int(meminfo["MemAvailable"].split()[0]) * 1024  # the page cache counts as available
    if need > avail:
        return f"skipped: {need / 1e9:.1f} GB needed, {avail / 1e9:.1f} GB available"
    model = AutoModelForCausalLM.from_pretrained(frozen, dtype=torch.bfloat16)
    n = sum(p.numel() for p in model.parameters())
    del model
    return f"loaded {n / 1e9:.2f}e9 parameters (bf16)"


def bigmodel_bytes(d: Path) -> int:
    return sum(f.stat().st_size for f in d.glob("*.safetensors"))


def run_path(kind: str, sub: Path, base: Path, work: Path, task, heldout: Path, profile) -> float:
    from a2rl.grading.trust import check_frozen
    from a2rl.run.artifacts import Limits, check_artifact, freeze
    from a2rl.tasklib.leaks import markers

    submissions = work / "sweep" / "submissions"
    submissions.mkdir(parents=True, exist_ok=True)
    print(f"  path ({kind}): {drop_caches()}", flush=True)
    st = Stages()
    t0 = time.perf_counter()
    limits = Limits(64, 1 << 40, 1 << 40)
    found_in = markers(heldout)
    key = os.urandom(32) if kind == "onecopy" else None  # the sweep's key: the job scans as it freezes
    artifact = st("check", check_artifact, sub, sub.parent, limits)
    with artifact:
        frozen = st("freeze", freeze, artifact, submissions / "sub-1", key, found_in.canary)
    st("check frozen", check_frozen, str(frozen), submissions)
    digest, found = grader_reads(kind, st, frozen, base, found_in, key, profile)
    st("grading-cache key", grading_key_of, digest, frozen, base, task)
    note = st("engine load (transformers)", engine_load, frozen)
    total = time.perf_counter() - t0
    print(f"    verdict {found.verdict} ({found.reason}); engine: {note}; hash {digest[:16]}")
    shutil.rmtree(frozen)
    return total


def grader_reads(kind: str, st: Stages, frozen: Path, base: Path, found_in, key, profile):
    """The grader's leak scan, content hash and lineage: reading the frozen copy (today, onepass), or taking the
    freeze's signed scan (onecopy: grading/frozenscan.py) and reading only the files under 16 MiB."""
    from a2rl.grading.lineage import lineage
    from a2rl.grading.onepass import one_pass_lineage, stream
    from a2rl.tasklib.leaks import scan_files
    from a2rl.weights import weights_hash

    if kind == "onecopy":
        from a2rl.grading.frozenscan import take_scan

        taken = st("take the freeze's scan", take_scan, frozen, key, found_in.canary)
        if taken is None:
            raise SystemExit("the freeze's scan did not verify (see the log)")
        leaks = st("leak scan (files under 16 MiB)", scan_files, frozen, found_in, taken[0].canary_in)
        scanned = taken[1]
    else:
        leaks = st("leak scan", scan_files, frozen, found_in)
        scanned = None if kind == "today" else st("content hash + samples", stream, frozen)
    print(f"    leaks: {leaks or 'none'}", flush=True)
    if scanned is None:
        return st("content hash", weights_hash, frozen), st("lineage", lineage, frozen, base)
    found = st("lineage (from the samples)", one_pass_lineage, frozen, base, scanned, profile.samples)
    return scanned.digest, found


def other_verdicts(sub: Path, base: Path, params: float, profile) -> None:
    """The one-pass verdicts of the other variants, each written in the submission's place (two full-size
    models on disk at most)."""
    from a2rl.grading.onepass import one_pass_lineage, stream

    for variant, expected in (("lora", "derived"), ("foreign", "foreign")):
        shutil.rmtree(sub)
        bigmodel.write_model(sub, params, "bf16", variant)
        found = one_pass_lineage(sub, base, stream(sub), profile.samples)
        print(
            f"  {variant}: {found.verdict} (expected {expected}); close share {found.close_share:.2f}, cosine min "
            f"{found.cosine_min:+.4f} median {found.cosine_median:+.4f}, relative L2 median {found.rel_l2_median:.4f} "
            f"max {found.rel_l2_max:.4f}",
            flush=True,
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--params", type=float, default=7.6e9)
    p.add_argument("--dir", type=Path, default=Path("/tmp/a2rl-submission-path"))
    p.add_argument("--path", choices=("onecopy", "onepass", "today", "both"), default="onecopy")
    p.add_argument("--variant", choices=bigmodel.VARIANTS, default="trained")
    p.add_argument("--other-variants", action="store_true", help="also the lora and foreign variants' verdicts")
    args = p.parse_args()
    work = args.dir
    shutil.rmtree(work, ignore_errors=True)
    try:
        measure(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)  # full-size copies: never left behind


def measure(args, work: Path) -> None:
    from a2rl.spec.tasks import get_task
    from a2rl.tasklib.prepare import ensure_prepared

    task = get_task("arith")
    heldout = ensure_prepared(task, work / "data").heldout_dir
    t0 = time.perf_counter()
    base = bigmodel.write_model(work / "base", args.params, "bf16")
    sub = bigmodel.write_model(work / "ws" / "output" / "v1", args.params, "bf16", args.variant)
    os.sync()
    print(
        f"wrote base and a {args.variant} submission of {gb(sub):.2f} GB each in {time.perf_counter() - t0:.0f} s "
        f"({os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f})",
        flush=True,
    )
    from a2rl.grading.lineage import lineage
    from a2rl.store.modeldirs import resolve_model

    tiny = resolve_model("builtin:tiny-llama")
    lineage(tiny, tiny)  # imports (torch, tokenizers, transformers) out of the timings
    kinds = ("today", "onepass") if args.path == "both" else (args.path,)
    profile = None
    if kinds == ("onepass",) or kinds == ("onecopy",):  # the base's bytes are not read again: made sparse first
        from a2rl.grading.profiles import base_profile

        print(f"  base profile: {drop_caches()}", flush=True)
        t1 = time.perf_counter()
        profile = base_profile(base)
        print(f"    base profile (once per sweep, not in R) {time.perf_counter() - t1:8.2f} s", flush=True)
        sparse_weights(base)
    before = plain_copy(sub, work / "cp")
    totals = {}
    for kind in kinds:
        if kind == "onepass" and profile is None:
            from a2rl.grading.profiles import base_profile

            profile = base_profile(base)
        totals[kind] = run_path(kind, sub, base, work, task, heldout, profile)
    after = plain_copy(sub, work / "cp")
    copy_s = (before + after) / 2
    print(
        f"  one plain copy (cp -r) of {gb(sub):.2f} GB: {before:.2f} s before the path, {after:.2f} s after it "
        f"(load average {os.getloadavg()[0]:.1f}); their mean {copy_s:.2f} s"
    )
    if profile is not None and args.other_variants:
        other_verdicts(sub, base, args.params, profile)
    for kind, total in totals.items():
        print(f"  path ({kind}) without generation: {total:.2f} s")
    for kind, total in totals.items():
        print(f"fixed-cost ratio R ({kind}) = {total / copy_s:.2f}")


if __name__ == "__main__":
    main()
