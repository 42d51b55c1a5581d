"""What every stage of the grading daemon (grading/daemon.py) shares: the sweep, its queue and ledger, the one
generation engine of the process, the baselines, and the few helpers the stages call (evaluate, refresh, the
pause after an infrastructure error)."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from pathlib import Path
from typing import Protocol

from filelock import Timeout

from a2rl.grading.evaluate import evaluate_model
from a2rl.llm.backends import Engine, resolve_settings
from a2rl.records import disk_full, now, while_full
from a2rl.spec.generation import GenerationPreset, get_preset
from a2rl.spec.tasks import Part, Task, get_task
from a2rl.store.baselines import BaselineRecord, ensure_baseline
from a2rl.store.queue import holder_id
from a2rl.store.results import FinishedRuns, ResultHook, no_hook, refresh_result
from a2rl.store.sweepdir import HEARTBEAT_S, GraderBeat, SweepDir
from a2rl.tasklib.prepare import ensure_prepared

log = logging.getLogger("a2rl.grader")
INFRA_RETRY_S = 30.0  # pause after a judge outage or similar before claiming again


class GraderPool(Protocol):
    """The sweep's grader jobs as its scheduler sees them (scheduling/graders.py; grading does not import
    scheduling)."""

    def alive(self) -> int:
        """Grader jobs the scheduler still has (queued or running), or cannot rule out."""
        ...

    def start(self) -> str | None:
        """Another grader job's id; None where max_workers are alive or one has not started serving yet."""
        ...


class Grader:
    """One grader process's state; GradingDaemon (grading/daemon.py) adds the stages."""

    def __init__(
        self, sweep: SweepDir, index: int = 0, on_result: ResultHook = no_hook, pool: GraderPool | None = None
    ):
        self.sweep = sweep
        self.on_result = on_result  # told of each result a late score refreshes
        self.pool = pool if sweep.spec.grader.autoscale else None  # None: this grader neither scales nor leaves early
        self._scaled_at: float | None = None  # (clock) when this grader last asked the pool for another
        self._leave_checked_at = float("-inf")  # (clock) when it last asked whether it may leave
        self.spec = sweep.spec
        self.settings = self.spec.grader
        self.holder = holder_id(f"grader{index}")
        self.queue, self.ledger = sweep.queue, sweep.ledger
        self.data_root = sweep.data_root()
        self.task_dirs = [Path(p) for p in self.spec.task_paths]
        self.run_ids = [r.run_id for r in sweep.runs()]  # runs.json is written once, with the sweep
        self.finished_runs = FinishedRuns(sweep, self.run_ids)
        self.graded = 0
        self.started_at = now()
        self._state, self._note = "idle", ""
        self._stop = threading.Event()
        self._baselines: dict[tuple[str, str, str], BaselineRecord] = {}
        self.sleep, self.clock = time.sleep, time.monotonic  # of the idle wait; tests drive a fake time
        self._engine: Engine | None = None
        self._graded_keys: dict[str, str] = {}  # grading key -> submission id, of scored ledger entries
        self._final_settled: set[str] = set()  # runs whose final entry is recorded, or that never get one

    @property
    def engine(self) -> Engine:
        """The one generation engine of this process, reused across submissions (made when first needed)."""
        if self._engine is None:
            self._engine = Engine(resolve_settings(self.settings))
        return self._engine

    def preset(self, model_name: str) -> GenerationPreset:
        return get_preset(next(m for m in self.spec.model_entries if m.name == model_name).generation)

    def task(self, name: str) -> Task:
        return get_task(name, self.task_dirs)

    def evaluate(
        self,
        task: Task,
        model_dir: Path,
        tokenizer_dir: Path,
        protocol: str,
        preset: GenerationPreset,
        part: Part = "heldout",
    ) -> tuple[float, dict]:
        return evaluate_model(
            task,
            model_dir,
            tokenizer_dir,
            data_root=self.data_root,
            protocol=protocol,
            batch_size=self.settings.batch_size,
            options=self.settings.task_options.get(task.name),
            engine=self.engine,
            preset=preset,
            part=part,
        )

    def baseline(self, task_name: str, model_name: str, protocol: str, retry_failed: bool = False) -> BaselineRecord:
        key = (task_name, model_name, protocol)
        if key not in self._baselines:
            model = next(m for m in self.spec.model_entries if m.name == model_name)
            self._state, prev = "baseline", self._state
            task = self.task(task_name)
            ensure_prepared(task, self.data_root)
            preset = get_preset(model.generation)
            rec = ensure_baseline(
                self.sweep,
                task,
                model_name,
                model.path,
                protocol,
                lambda t, m, tok, p, part: self.evaluate(t, m, tok, p, preset, part),
                retry_failed=retry_failed,
            )
            if rec.status == "failed":
                log.error("BASELINE FAILED for %s / %s / %s: %s", task_name, model_name, protocol, rec.error)
            self._baselines[key] = rec
            self._state = prev
        return self._baselines[key]

    def refresh(self, run_id: str) -> None:
        """Fold what was graded after the run's result was written (by its job, or by reaping a lost run) into it."""
        try:
            refreshed = while_full(lambda: refresh_result(self.sweep, run_id), f"updating the result of {run_id}")
        except Timeout as e:  # the next score of the run folds this one in too
            self._held(e)
            return
        if refreshed is not None:
            self.on_result(self.sweep, run_id, refreshed)

    def _heartbeat_loop(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            try:
                self._beat()
            except OSError as e:  # no room for it now: the next one tells the others this grader lives
                if not disk_full(e):
                    raise
                log.warning("heartbeat not written: %s", e.strerror)

    def _beat(self) -> None:
        GraderBeat(
            holder=self.holder,
            host=socket.gethostname(),
            pid=os.getpid(),
            started_at=self.started_at,
            heartbeat_at=now(),
            graded=self.graded,
            state=self._state,
            note=self._note,
            **(self._engine.counts() if self._engine is not None else {}),
        ).dump(self.sweep.graders / f"{self.holder}.json")

    def _held(self, e: Timeout) -> None:
        log.warning("lock %s held for %g s; skipping this round", e.lock_file, self.settings.lock_timeout_s)

    def _pause(self, doing: str, cause: object, note: bool = True) -> None:
        """After an infrastructure error (a judge outage, no space): say so, and wait before claiming or scoring
        again. `note`: the heartbeat shows it too."""
        log.error("cannot %s now (%s); retrying in %.0f s", doing, cause, INFRA_RETRY_S)
        if note:
            self._note = f"infrastructure error: {cause}"
        self._stop.wait(INFRA_RETRY_S)
