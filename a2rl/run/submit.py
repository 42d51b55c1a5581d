"""A run's submissions: from a model path the agent names to the paper's /submit answer.

Runs inside the agent's job (behind the HTTP API): it checks the path and the directory, freezes the accepted
files into the sweep directory, enqueues (a signed queue entry), and blocks until the grader has recorded the
result. That is the run's one grading wait at a time (run/budget.py has the rule for the clock).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Callable

from filelock import Timeout

from a2rl.recording.diskuse import run_disk_use
from a2rl.recording.snapshots import snapshot_code
from a2rl.records import RecordError, StorageFull, disk_full
from a2rl.run.artifacts import (
    Artifact,
    ArtifactError,
    Limits,
    check_artifact,
    check_model_path,
    freeze,
    resolve_submission,
)
from a2rl.run.budget import Budget
from a2rl.run.workspace import Workspace
from a2rl.spec.grid import RunSpec
from a2rl.spec.sizing import run_storage_gb
from a2rl.store.baselines import BaselineRecord, load_baseline
from a2rl.store.ledger import LedgerEntry
from a2rl.store.results import AgentUsage
from a2rl.store.retries import RETRIES
from a2rl.store.sweepdir import SweepDir
from a2rl.units import GIB
from a2rl.weights import parameter_count

log = logging.getLogger("a2rl.submit")

RETRY_AFTER_S = 10  # what the API tells an agent to wait after NotEnqueued


class NotEnqueued(Exception):
    """The queue could not take the submission now (its lock held past its timeout, the shared file system
    failing): nothing was enqueued, and the same submission may be made again."""


class OverStorageBudget(Exception):
    """The submission's frozen copy would take the run past its storage budget (storage.run_gb): nothing was
    enqueued; the agent may submit a smaller model (bf16, fewer files) once it has room."""

    def __init__(self, used: int, needed: int, allowed: int):
        self.used, self.needed, self.allowed = used, needed, allowed
        super().__init__(
            f"over this run's storage budget: the submission needs {needed / GIB:.2f} GiB, and the run already "
            f"keeps {used / GIB:.2f} GiB of its {allowed / GIB:.2f} GiB in the sweep directory (frozen submissions "
            f"the final part may still pick, code snapshots, logs): nothing was submitted; submit a smaller model "
            f"(e.g. saved in bf16, without extra files)"
        )

    def answer(self) -> dict[str, Any]:
        return {"error": str(self), "bytes_used": self.used, "bytes_needed": self.needed, "bytes_allowed": self.allowed}


class RunSubmitter:
    def __init__(
        self,
        sweep: SweepDir,
        run: RunSpec,
        ws: Workspace,
        budget: Budget,
        usage: Callable[[], AgentUsage | None] = lambda: None,
        canary: str | None = None,
    ):
        """`usage`: the agent's tokens and cost so far (its transcript parsed), recorded with each submission.
        `canary`: the task's held-out canary, searched for in the weights as they are frozen (run/onecopy.py)."""
        self.sweep, self.run, self.ws, self.budget, self.usage = sweep, run, ws, budget, usage
        self.canary = canary
        self.settings = sweep.spec.grader
        self.queue, self.ledger = sweep.queue, sweep.ledger
        self.limits = Limits.for_base(self.settings, ws.model)
        self.storage_bytes = int(run_storage_gb(sweep.spec, parameter_count(ws.model)) * GIB)

    def storage_room(self) -> int:
        """Bytes the run may still leave in the sweep directory (negative: over its budget)."""
        return self.storage_bytes - run_disk_use(self.sweep, self.run.run_id).total

    def submit(self, model_path: str, *, wait: bool = True, force: bool = False, final: bool = False) -> dict[str, Any]:
        """Enqueue and (by default) wait for the score. `force` is for the run's own wrap-up submission, made
        after the agent stopped (its time is not the agent's). `final`: the agent marks it as its pick for the
        final part (grader.final: agent). MalformedPath, WaitInFlight and BudgetExhausted are refusals: nothing
        is enqueued."""
        check_model_path(model_path)
        if force:
            self.budget.pause()
            try:
                return self._submit(model_path, wait, final)
            finally:
                self.budget.resume()
        with self.budget.grading_wait():
            return self._submit(model_path, wait, final)

    def _submit(self, model_path: str, wait: bool, final: bool = False) -> dict[str, Any]:
        try:
            artifact, error = (
                check_artifact(resolve_submission(model_path, self.ws.root), self.ws.output, self.limits),
                None,
            )
        except ArtifactError as e:
            artifact, error = Artifact(""), str(e)
        with artifact, _not_enqueued():
            if (needed := sum(artifact.sizes[n] for n in artifact.kept)) > (room := self.storage_room()):
                raise OverStorageBudget(self.storage_bytes - room, needed, self.storage_bytes)
            entry = self.queue.submit(
                self.run.run_id,
                str(model_path),
                lambda sid: str(freeze(artifact, self.sweep.submissions / sid, self.sweep.key, self.canary)),
                error,
                self.snapshot,
                **self.at_submit(),
                **({"final": True} if final else {}),
            )
        if not wait:
            return {"submission_id": entry.submission_id, "queued": True}
        recorded = self.wait_for(entry.submission_id, self.settings.max_wait_s)
        if recorded is None:
            return {
                "submission_id": entry.submission_id,
                "error": f"not graded within {self.settings.max_wait_s:g} s; it stays queued and will be "
                f"scored when a grader is available",
            }
        return self.response(recorded)

    def at_submit(self) -> dict[str, Any]:
        """The budget clock, tokens and cost now, for the scaling analyses; a transcript that cannot be read
        costs the token count, never the submission."""
        out: dict[str, Any] = {"budget_used_s": round(self.budget.used(), 3)}
        try:
            usage = self.usage()
        except Exception:
            log.exception("reading the transcript's usage failed")
            usage = None
        if usage is not None and usage.input_tokens is not None:
            out["tokens"] = usage.input_tokens + (usage.output_tokens or 0)
        if usage is not None:
            out["cost_usd"] = usage.cost_usd
        return out

    def snapshot(self, sid: str, seq: int) -> str | None:
        """The code behind the submission, recorded while the clock is stopped; a failure to record it is
        logged and returned (for its queue and ledger entries), never the agent's loss of a submission."""
        try:
            snapshot_code(
                self.sweep.root,
                self.run.run_id,
                self.ws.code,
                submission_id=sid,
                seq=seq,
                settings=self.sweep.spec.recording,
                room_bytes=self.storage_room(),
            )
            return None
        except Exception as e:
            if disk_full(e):  # the queue waits for room and records it then
                raise
            log.exception("code snapshot for %s failed", sid)
            return f"code snapshot failed: {type(e).__name__}: {e}"

    def wait_for(self, sid: str, timeout_s: float) -> LedgerEntry | None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if (entry := self.ledger.listed(sid)) is not None:
                    return entry
            except OSError as e:  # ESTALE and the like: enqueued already, so read again rather than fail
                RETRIES.note("ledger entry", e)
            time.sleep(min(self.settings.poll_s, 0.5))
        return None

    def baseline(self) -> BaselineRecord | None:
        return load_baseline(self.sweep, self.run.task, self.run.model.name, self.run.protocol)

    def response(self, entry: LedgerEntry) -> dict[str, Any]:
        """The paper's /submit answer for a recorded submission, with the best of this run so far."""
        scored = [e for e in self.ledger.entries(self.run.run_id) if e.status == "scored" and e.seq <= entry.seq]
        best = max(scored, key=lambda e: e.score, default=None)
        base = self.baseline()
        base_score = base.score if base and base.status == "ok" else None
        out: dict[str, Any] = {
            "submission_id": entry.submission_id,
            "score": entry.score,
            "baseline_score": base_score,
            "improvement": None if entry.score is None or base_score is None else entry.score - base_score,
            "best": best.score if best else None,
            "best_submission_id": best.submission_id if best else None,
            "total_submissions": entry.seq,
        }
        if entry.part == "feedback":  # feedback: split: the final part's score comes only after the run
            out["scored_on"] = f"feedback part ({entry.n_items} items); the final part is scored after the run"
        if entry.marked_final:
            out["marked_final"] = True
        if entry.copy_of_base:
            out["note"] = "identical to the base model: scored as the baseline"
        if entry.error:
            out["error"] = entry.error
        if base is not None and base.status == "failed":
            out["baseline_error"] = base.error
        return out


@contextmanager
def _not_enqueued() -> Iterator[None]:
    """Lock time-outs and storage errors while enqueueing as NotEnqueued (a full disk stays StorageFull)."""
    try:
        yield
    except StorageFull:
        raise
    except (Timeout, OSError, RecordError) as e:
        raise NotEnqueued(f"the sweep directory did not take the submission ({type(e).__name__}: {e})") from e
