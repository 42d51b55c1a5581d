"""Baselines: the untouched base model's score, once per (task, model weights, evaluator version, protocol).

A failed baseline is recorded as failed, with its error, and shown as such everywhere; it never becomes 0.
Records are signed (store/integrity.py): the sweep's copy with the sweep's key, the shared cache's with the
cache directory's own; one that does not verify is ignored (and computed again by the grader).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable, Literal

from a2rl.records import RecordError, now
from a2rl.spec.tasks import EvalProtocol, Part, Task
from a2rl.store.integrity import SignedRecord, create_key, read_key
from a2rl.store.locks import sweep_lock
from a2rl.store.modeldirs import resolve_model
from a2rl.store.sweepdir import SweepDir
from a2rl.weights import weights_hash

log = logging.getLogger("a2rl.baselines")


class BaselineRecord(SignedRecord):
    task: str
    protocol: EvalProtocol
    model: str
    model_path: str
    weights_hash: str
    evaluator_version: int
    status: Literal["ok", "failed"]
    score: float | None = None  # on `part`: what the runs' submissions are answered on
    part: Part = "heldout"
    final_score: float | None = None  # under `feedback: split`, on the final part (never shown to the agent)
    error: str | None = None
    graded_at: float
    eval_seconds: float = 0.0
    details: dict[str, Any] = {}


def baseline_path(sweep: SweepDir, task: str, model: str, protocol: str) -> Path:
    return sweep.baselines / f"{task}__{model}__{protocol}.json"


def _load(path: Path, key: bytes, problems: list[str] | None = None) -> BaselineRecord | None:
    """The verified record at `path`, or None (missing, or unverifiable: logged and added to `problems`)."""
    try:
        return BaselineRecord.load_verified_or_none(path, key)
    except RecordError as e:
        log.warning("%s", e)
        if problems is not None:
            problems.append(str(e))
        return None


def load_baseline(
    sweep: SweepDir, task: str, model: str, protocol: str, problems: list[str] | None = None
) -> BaselineRecord | None:
    return _load(baseline_path(sweep, task, model, protocol), sweep.key, problems)


def ensure_baseline(
    sweep: SweepDir,
    task: Task,
    model_name: str,
    model_path: str,
    protocol: EvalProtocol,
    evaluate: Callable[[Task, Path, Path, str, Part], tuple[float, dict]],
    *,
    retry_failed: bool = False,
) -> BaselineRecord:
    """The sweep's baseline record for (task, model, protocol), computing it at most once across graders.

    The optional shared cache (grader.baseline_cache) is keyed by weights hash, evaluator version, protocol and
    held-out split (Task.heldout_id), so other sweeps reuse it; the sweep's own copy is keyed by the names the run
    reports use. A grader that starts retries a failed baseline once (`retry_failed`), so fixing the cause and
    relaunching is enough. Under `feedback: split` it scores the base model on both parts (the shared cache is then not
    used: each data root divides its items with its own secret seed).
    """
    part = task.feedback_part(protocol)
    own = baseline_path(sweep, task.name, model_name, protocol)
    own.parent.mkdir(parents=True, exist_ok=True)
    with sweep_lock(str(own) + ".lock"):
        rec = _load(own, sweep.key)
        if (
            rec is not None
            and rec.evaluator_version == task.spec.evaluator_version
            and rec.part == part
            and not (retry_failed and rec.status == "failed")
        ):
            return rec
        model_dir = resolve_model(model_path)
        digest = weights_hash(model_dir)
        shared = None
        if sweep.spec.grader.baseline_cache and part == "heldout":
            cache = Path(sweep.spec.grader.baseline_cache)
            create_key(cache)
            cache_key = read_key(cache)
            split = task.heldout_id(sweep.data_root())[:12]  # the split this sweep's data root drew
            shared = cache / f"{task.name}__{digest[:20]}__v{task.spec.evaluator_version}__{protocol}__{split}.json"
            cached = _load(shared, cache_key)
            if cached is not None and cached.status == "ok":
                cached.model, cached.model_path = model_name, str(model_dir)
                cached.sign(sweep.key).dump(own)
                return cached
        t0 = now()
        try:
            score, details = evaluate(task, model_dir, model_dir, protocol, part)
            final = evaluate(task, model_dir, model_dir, protocol, "final")[0] if part == "feedback" else None
            rec = BaselineRecord(
                part=part,
                final_score=final,
                task=task.name,
                protocol=protocol,
                model=model_name,
                model_path=str(model_dir),
                weights_hash=digest,
                evaluator_version=task.spec.evaluator_version,
                status="ok",
                score=score,
                graded_at=now(),
                eval_seconds=now() - t0,
                details=details,
            )
        except Exception as e:  # recorded and shown as a failure, never as a score of 0
            rec = BaselineRecord(
                task=task.name,
                protocol=protocol,
                model=model_name,
                model_path=str(model_dir),
                weights_hash=digest,
                evaluator_version=task.spec.evaluator_version,
                status="failed",
                error=f"{type(e).__name__}: {e}",
                graded_at=now(),
                eval_seconds=now() - t0,
            )
        rec.sign(sweep.key).dump(own)
        if shared is not None and rec.status == "ok":
            rec.model_copy().sign(cache_key).dump(shared)
        return rec
