"""Preparing a task's data: run its prepare script into a data root (a2rl/spec/tasks.py describes the layout:
train/, heldout/ with its CANARY, prepared.json) and divide the held-out items into the feedback and final parts of
a `feedback: split` task."""

from __future__ import annotations

import os
import random
import secrets
import shutil
from pathlib import Path

from a2rl.errors import SpecError
from a2rl.records import RecordError, now, sha256_file
from a2rl.spec.roots import DATA_FIX, guarded
from a2rl.spec.tasks import CANARY, PARTS_DIR, PreparedData, SplitRecord, Task, TaskData
from a2rl.store.locks import sweep_lock
from a2rl.tasklib.envs import load_module


def ensure_prepared(
    task: Task, data_root: Path, *, allow_network: bool = False, source: Path | None = None
) -> TaskData:
    """Prepare once; racing preparers serialise on a lock and the loser finds the work done.

    `source` is a directory holding the upstream files in their published format; given, prepare reads
    them instead of downloading (how tests and air-gapped sites prepare). Data that another version of the
    prepare script wrote is prepared again, replacing it. A data root it cannot write is a RootError."""
    task.check_engines()
    with guarded(Path(data_root), "data root", DATA_FIX):
        return _ensure_prepared(task, data_root, allow_network=allow_network, source=source)


def unpreparable(task: Task, data_root: Path) -> str | None:
    """Why a launch cannot use this task's data under `data_root`: not prepared (or by another version of its
    prepare script) and not preparable offline, which needs `a2rl prepare` where the internet is; else None."""
    if task.spec.offline or task.prepared(data_root):
        return None
    state = (
        "was prepared by another version of its prepare script"
        if (Path(data_root) / task.name / "prepared.json").exists()
        else "is not prepared"
    )
    return (
        f"task {task.name!r} {state} under {data_root}: run `a2rl prepare {task.name} --data-root {data_root}` "
        "(with --source if you prepared it from one) on a machine with internet access (a login node)"
    )


def _ensure_prepared(task: Task, data_root: Path, *, allow_network: bool, source: Path | None) -> TaskData:
    if task.prepared(data_root):
        return _ensure_parts(task, data_root)
    base = Path(data_root) / task.name
    if not (allow_network or source) and (problem := unpreparable(task, data_root)):
        raise SpecError([problem])
    base.mkdir(parents=True, exist_ok=True)
    with sweep_lock(str(base) + ".lock"):
        if task.prepared(data_root):
            return _ensure_parts(task, data_root, locked=True)
        tmp = base / f".prepare-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        (tmp / "train").mkdir(parents=True)
        (tmp / "heldout").mkdir(mode=0o700)
        # Taken before the script runs: an edit meanwhile leaves the data stale, never falsely current.
        fingerprint = task.prepare_fingerprint()
        module = load_module(task.folder / task.spec.prepare, f"a2rl_task_{task.name}_prepare", fresh=True)
        module.prepare(tmp / "train", tmp / "heldout", **({"source": Path(source)} if source else {}))
        missing = [f for f in [*task.spec.train_files, *task.spec.train_links] if not (tmp / "train" / f).exists()]
        if missing:
            raise SpecError([f"task {task.name!r}: prepare did not write train file(s) {missing}"])
        (tmp / "heldout" / CANARY).write_text(f"a2rl-canary-{secrets.token_hex(16)}\n")
        shutil.rmtree(base / PARTS_DIR, ignore_errors=True)  # a split of the data being replaced
        for part in ("train", "heldout"):
            shutil.rmtree(base / part, ignore_errors=True)
            os.replace(tmp / part, base / part)
        tmp.rmdir()
        sums = {
            str(p.relative_to(base)): sha256_file(p)
            for part in ("train", "heldout")
            for p in sorted((base / part).rglob("*"))
            if p.is_file()
        }
        PreparedData(task=task.name, prepared_at=now(), prepare_fingerprint=fingerprint, checksums=sums).dump(
            base / "prepared.json"
        )
        return _ensure_parts(task, data_root, locked=True)


def _ensure_parts(task: Task, data_root: Path, *, locked: bool = False) -> TaskData:
    """Divide the held-out items into the feedback and final parts, once per prepared split (task.yaml
    `split`), with a seed drawn from the OS's secret source and kept in heldout-parts/SEED: the same parts
    for every run and grader of this data root, and none an agent can rebuild from public code."""
    data = task.data(data_root)
    split = task.spec.split
    if split is None:
        return data
    src = data.heldout_dir / split.file
    want = dict(file=split.file, feedback=split.feedback, final=split.final)
    try:
        rec = SplitRecord.load_or_none(data.parts_dir / "split.json")
    except RecordError:  # another version's record: divide again
        rec = None
    if rec is not None and rec.model_dump(include=set(want)) == want and rec.file_sha256 == sha256_file(src):
        return data
    if not locked:
        with sweep_lock(str(Path(data_root) / task.name) + ".lock"):
            return _ensure_parts(task, data_root, locked=True)
    rows = [line for line in src.read_text(encoding="utf-8").splitlines() if line.strip()]
    if split.feedback + split.final > len(rows):
        raise SpecError(
            [
                f"task {task.name!r}: split wants {split.feedback} feedback + {split.final} final items but "
                f"{split.file} holds {len(rows)}"
            ]
        )
    seed = secrets.randbits(64)
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    tmp = data.parts_dir.parent / f".parts-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(mode=0o700)
    (tmp / "SEED").write_text(f"{seed}\n")
    cut = {"feedback": order[: split.feedback], "final": order[split.feedback : split.feedback + split.final]}
    for part, picked in cut.items():
        # a copy of heldout/ (the canary and any other file an evaluator reads) with this part's items only
        shutil.copytree(data.heldout_dir, tmp / part, ignore=shutil.ignore_patterns("SEED"))
        (tmp / part / split.file).write_text("".join(rows[i] + "\n" for i in sorted(picked)), encoding="utf-8")
    SplitRecord(**want, file_sha256=sha256_file(src)).dump(tmp / "split.json")
    shutil.rmtree(data.parts_dir, ignore_errors=True)
    os.replace(tmp, data.parts_dir)
    return data
