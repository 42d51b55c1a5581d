"""The reference pipeline's schedule: each stage's deadline is its share of the budget left when it starts (the
grading API's /time), and training stops there (after the step in progress)."""

from __future__ import annotations

import json
import os
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

import torch
from transformers import TrainerCallback

from a2rl.reference.process import log


def remaining_budget() -> float | None:
    """Seconds of budget left, from the grading API's /time; None without a grading server (or its answer)."""
    url = os.environ.get("GRADING_SERVER_URL")
    if not url:
        return None
    req = urllib.request.Request(
        f"{url}/time", headers={"Authorization": f"Bearer {os.environ.get('GRADING_TOKEN', '')}"}
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return float(json.load(resp)["remaining_s"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        log(f"/time unavailable ({e!r}): stages run their planned steps")
        return None


def stage_seconds(remaining_s: float, stages_left: int, reserve: float = 0.15) -> float:
    """A stage's share of the budget left: equal shares for the stages still to run, after keeping `reserve` of
    it (at least a minute) for saving and submitting the last model."""
    return max(0.0, remaining_s - max(60.0, reserve * remaining_s)) / max(1, stages_left)


class StopAt(TrainerCallback):
    """Ends training at a deadline (after the step in progress); every process stops at the same step."""

    def __init__(self, deadline: float | None, clock: Callable[[], float] = time.monotonic):
        self.deadline, self.clock = deadline, clock

    def on_step_end(self, args, state, control, **kwargs):
        stop = self.deadline is not None and self.clock() >= self.deadline
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            from accelerate.utils import broadcast_object_list

            stop = broadcast_object_list([stop])[0]  # rank 0's clock decides for all
        if stop:
            control.should_training_stop = True
        return control


@dataclass
class Schedule:
    """The stages still to run; each one's deadline is its share of the budget left when it starts."""

    stages: list[str]
    remaining: Callable[[], float | None] = remaining_budget
    clock: Callable[[], float] = time.monotonic

    def deadline(self, stage: str) -> float | None:
        left = self.remaining()
        n = len(self.stages)
        if stage in self.stages:
            self.stages.remove(stage)
        if left is None:
            return None
        seconds = stage_seconds(left, n)
        log(f"stage {stage}: {seconds:.0f} s of the {left:.0f} s budget left")
        return self.clock() + seconds
