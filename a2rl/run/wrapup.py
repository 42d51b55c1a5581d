"""A run's end: the agent warned before its budget or the job's time ends (a WRAP_UP file), its last saved model
that was not scored submitted for it (auto-submit), and the job's wait for the scores, which ends before the
scheduler kills the job."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Callable

from a2rl.run.heartbeat import RunState
from a2rl.run.workspace import Workspace
from a2rl.store.baselines import baseline_path

log = logging.getLogger("a2rl.job")
KILL_MARGIN_S = 15.0  # the grading wait ends this long before the scheduler kills the job


class WrapUp(RunState):
    """AgentRun's (run/job.py) wrap-up: the warning, and the auto-submission at the end."""

    def _warn(self, ws: Workspace, message: str) -> None:
        (ws.root / "WRAP_UP").write_text(message + "\n")
        self._log(f"wrap-up warning: {message}")

    def _auto_submit(self) -> bool:
        """Submit the newest saved model that was not scored since it was last written (MLGym-style); whether
        it did. Whatever the agent left in its workspace (link loops, FIFOs) is logged, never the job's end."""
        ws = self.submitter.ws
        try:
            candidate = last_saved_model(ws.output)
            if candidate is None:
                return False
            newest = max(f.stat().st_mtime for f in candidate.iterdir())
            for entry in self.sweep.queue.entries(self.run.run_id):
                given = Path(entry.model_path)
                if (
                    given if given.is_absolute() else ws.root / given
                ).resolve() == candidate and entry.submitted_at >= newest:
                    return False
            self._log(f"auto-submitting {candidate} (saved, not yet scored)")
            self.submitter.submit(str(candidate), wait=False, force=True)
            return True
        except Exception as e:
            log.exception("the wrap-up submission of %s failed", self.run.run_id)
            self._log(f"wrap-up submission failed: {type(e).__name__}: {e}")
            return False

    def _graded(self) -> bool:
        """Every submission of the run and its baseline are recorded."""
        run = self.run
        return (
            len(self.sweep.ledger.entries(run.run_id)) >= self.sweep.queue.count(run.run_id)
            and baseline_path(self.sweep, run.task, run.model.name, run.protocol).exists()
        )


def wait_for_grading(
    graded: Callable[[], bool],
    *,
    max_wait_s: float,
    poll_s: float,
    kill_at: Callable[[], float | None],
    terminated: threading.Event,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """Poll until `graded()`, for at most `max_wait_s`, and no later than KILL_MARGIN_S before the job is
    killed: `kill_at()` is asked at every poll, as the time-limit signal may arrive during the wait; SIGTERM
    ends it at once. Why it ended: "graded", "max_wait_s", "time limit" or "SIGTERM"."""
    deadline = clock() + max_wait_s
    while not graded():
        if terminated.is_set():
            return "SIGTERM"
        t, kill = clock(), kill_at()
        if kill is not None and t >= kill - KILL_MARGIN_S:
            return "time limit"
        if t >= deadline:
            return "max_wait_s"
        sleep(poll_s)
    return "graded"


def last_saved_model(output: Path) -> Path | None:
    """The most recently written directory under output/ (two levels deep) that holds safetensors weights."""
    dirs = {p.parent for pattern in ("*/*.safetensors", "*/*/*.safetensors") for p in output.glob(pattern)}
    dirs = [d.resolve() for d in dirs if (d / "config.json").exists()]
    return max(dirs, key=lambda d: max(f.stat().st_mtime for f in d.iterdir()), default=None)
