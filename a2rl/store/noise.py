"""Evaluation noise, per (task, model, protocol): `a2rl calibrate` grades the same weights K times (the baseline,
and optionally the best submissions) and records the scores, `noise/<task>__<model>__<protocol>.json` in the sweep
directory.

Tables mark an improvement as within noise when it is no larger than NOISE_SDS pooled standard deviations of
those repeated scores: a difference one grading's randomness (a judge, sampled decoding) could make by itself.
"""

from __future__ import annotations

import math
from pathlib import Path

from a2rl.records import RecordError
from a2rl.store.integrity import SignedRecord
from a2rl.store.sweepdir import SweepDir

NOISE_SDS = 2.0


class NoiseRecord(SignedRecord):
    task: str
    model: str
    protocol: str
    evaluator_version: int
    repeats: int
    scores: dict[str, list[float]]  # "baseline" or a submission id → the K scores of those same weights
    measured_at: float

    @property
    def sd(self) -> float:
        """Pooled sample standard deviation over the repeated gradings of each set of weights."""
        groups = [s for s in self.scores.values() if len(s) > 1]
        dof = sum(len(s) - 1 for s in groups)
        if not dof:
            return 0.0
        ss = sum(sum((x - sum(s) / len(s)) ** 2 for x in s) for s in groups)
        return math.sqrt(ss / dof)

    def within(self, improvement: float) -> bool:
        return abs(improvement) <= NOISE_SDS * self.sd


def noise_path(sweep: SweepDir, task: str, model: str, protocol: str) -> Path:
    return sweep.root / "noise" / f"{task}__{model}__{protocol}.json"


def load_noise(sweep: SweepDir, task: str, model: str, protocol: str, problems: list[str]) -> NoiseRecord | None:
    try:
        return NoiseRecord.load_verified_or_none(noise_path(sweep, task, model, protocol), sweep.key)
    except RecordError as e:
        problems.append(str(e))
        return None
