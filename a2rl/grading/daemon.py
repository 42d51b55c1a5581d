"""The grading daemon: claims submissions from the sweep's queue under a lease, evaluates them on the held-out
split, and records each result in the ledger. It is its own process (its own job); several may serve one queue.

It exits when every run of the sweep has its result and nothing is pending, or after an idle limit: that long
with nothing to grade while no run of the sweep is at work, queued or deferred (store/results.py any_at_work).
With `grader.workers: auto` the graders scale themselves through a GraderPool (the scheduler's side,
scheduling/graders.py): one whose oldest unclaimed submission has waited `scale_wait_s` starts another grader
job (up to `max_workers`), and one with nothing to claim for `scale_idle_s` leaves while another grader serves
the queue, never the last.

It trusts nothing it reads from the shared file system: queue entries must carry the sweep's HMAC (the queue
rejects others), the artifact must be a frozen copy directly under submissions/ whose files pass
grading/trust.py, it deletes only such copies, and a lock held past the sweep's lock timeout costs a round (a
log line), never the daemon.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import socket
import threading
import time
from pathlib import Path
from typing import Protocol

import submitit
from filelock import FileLock, Timeout

from a2rl.store.baselines import BaselineRecord, ensure_baseline
from a2rl.errors import InfraError
from a2rl.store.ledger import LedgerEntry
from a2rl.records import disk_full, now, while_full
from a2rl.store.results import FinishedRuns, ResultHook, no_hook, refresh_result
from a2rl.store.queue import Claim, holder_id
from a2rl.store.sweepdir import HEARTBEAT_S, GraderBeat, SweepDir
from a2rl.spec.tasks import DEFAULT_PROTOCOL, Part, Task, get_task
from a2rl.tasklib.evaluator import load_evaluator
from a2rl.tasklib.prepare import ensure_prepared
from a2rl.tasklib.evaluator import evaluate as run_evaluator
from a2rl.tasklib.leaks import markers, scan_files
from a2rl.grading.lineage import copy_lineage
from a2rl.grading.onepass import stream
from a2rl.grading.profiles import submission_lineage
from a2rl.grading.trust import UntrustedArtifact, check_frozen, frozen_dir
from a2rl.llm.backends import CPU_SETTINGS, BackendSettings, Engine, EngineKey, engine_key, resolve_settings
from a2rl.llm.contextcap import ContextCap
from a2rl.spec.generation import GenerationPreset, get_preset

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


def evaluate_model(
    task: Task,
    model_dir: Path,
    tokenizer_dir: Path,
    *,
    data_root: Path,
    protocol: str = DEFAULT_PROTOCOL,
    batch_size: int | None = None,
    options: dict | None = None,
    engine: Engine | None = None,
    preset: GenerationPreset | None = None,
    part: Part = "heldout",
) -> tuple[float, dict]:
    """Score one model on the task's held-out split under `protocol` (the run's, never an option a sweep's
    task_options could set apart from the run id and the ledger) with the engine's backend (without one: a
    transformers engine on CPU, for this call). `part`: all held-out items, or one side of the split
    (`feedback: split`). An evaluator that serves a second model (localjudge's judge) declares an `engine`
    parameter and gets the engine."""
    options = {**task.spec.eval, **(options or {}), "protocol": protocol}
    if batch_size:
        options["batch_size"] = batch_size
    preset = preset or get_preset()
    engine = engine or Engine(CPU_SETTINGS)
    generator = engine.get(model_dir, tokenizer_dir, preset)
    cap = generator.context_cap = ContextCap()  # this evaluation's: the generator serves many
    score, details = run_evaluator(
        load_evaluator(task), generator, task.data(data_root).part_dir(part), options, engine, task=task.name
    )
    if (bit := cap.record()) is not None:  # new tokens were capped at the model's context: the ledger says so
        details["context_cap"] = bit
    return score, details


def n_items(task: Task, part: Part, details: dict) -> int | None:
    """How many held-out items stand behind a score: the split's size for a part, else the evaluator's `n`."""
    split = task.spec.split
    if part != "heldout" and split is not None:
        return split.feedback if part == "feedback" else split.final
    n = details.get("n")
    return n if isinstance(n, int) else None


def select_final(scored: list[LedgerEntry], rule: str) -> tuple[LedgerEntry, str]:
    """The submission a run is judged by on the final part (grader.final), and the rule that picked it: the best
    on the feedback part (ties: the earliest, as the run's `best`), the last scored, or the latest the agent
    marked final (none marked: the best)."""
    best = max(scored, key=lambda e: (e.score, -e.seq))
    if rule == "last":
        return max(scored, key=lambda e: e.seq), "last"
    if rule == "agent":
        marked = [e for e in scored if e.marked_final]
        return (max(marked, key=lambda e: e.seq), "agent") if marked else (best, "agent: none marked, best-feedback")
    return best, "best-feedback"


def grading_key(
    digest: str,
    model: EngineKey,
    task: Task,
    protocol: str,
    settings: BackendSettings,
    preset: GenerationPreset,
    options: dict | None,
    part: Part = "heldout",
) -> str:
    """What fixes a submission's score: its weights, architecture (config) and tokenizer, the task, evaluator
    version and protocol, the backend settings, the preset, the task options and the part of the held-out
    items (named only when not all of them: older keys stay valid). Equal keys, equal scores (the grading
    cache)."""
    return hashlib.sha256(
        json.dumps(
            ([part] if part != "heldout" else [])
            + [
                digest,
                model.__dict__,
                task.name,
                task.spec.evaluator_version,
                protocol,
                settings.record(),
                preset.record(),
                options or {},
            ],
            sort_keys=True,
            default=str,
        ).encode()
    ).hexdigest()


class GradingDaemon:
    """Claims submissions from the sweep's queue under a lease, checks that the frozen artifact is trustworthy,
    scores it on the held-out split, records it once in the ledger and folds it into the run's result. Computes
    the baselines first; exits when the sweep is done or after its idle limit."""

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

    # ---------------------------------------------------------------- lifecycle
    def run(self) -> int:
        self._beat()  # at once: a grader pool counts a started grader without a heartbeat as still starting
        beat = threading.Thread(target=self._heartbeat_loop, daemon=True)
        beat.start()
        try:
            for task_name in self.spec.tasks:
                for model in self.spec.model_entries:
                    for protocol in self.spec.protocols:
                        self.baseline(task_name, model.name, protocol, retry_failed=True)
            for run in self.sweep.runs():  # results written while no baseline was recorded yet
                self.refresh(run.run_id)
            idle_since = quiet_since = self.clock()
            while True:
                seen = self.queue.pending_stamp()
                # the lock only when there is something to claim: an idle grader lists pending/ and no more
                try:
                    claim = (
                        while_full(
                            lambda: self.queue.claim(self.holder, self.settings.lease_s, self.ledger.has),
                            "claiming a submission",
                        )
                        if self.queue.pending_ids()
                        else None
                    )
                except Timeout as e:
                    self._held(e)
                    claim = None
                if claim is not None:
                    self.grade(claim)
                    idle_since = quiet_since = self.clock()
                    self.scale_up()
                    continue
                if (due := next((r for r in self.run_ids if self.final_due(r)), None)) is not None:
                    self.score_final(due)
                    idle_since = self.clock()
                    continue
                if self.sweep_finished():
                    self._note = "every run has finished"
                    return 0
                self.scale_up()
                if self.finished_runs.any_at_work():
                    idle_since = self.clock()
                elif self.clock() - idle_since > self.settings.idle_timeout_s:
                    self._note = f"idle for {self.settings.idle_timeout_s:g} s with no run at work, queued or deferred"
                    return 0
                if self.clock() - quiet_since > self.settings.scale_idle_s and self.leave_to_others():
                    return 0
                self.queue.wait_for_change(seen, self.settings.poll_s, sleep=self.sleep, clock=self.clock)
        finally:
            self._state = "exited"
            self._stop.set()
            self._beat()
            log.info("grader %s exits (%s), graded %d", self.holder, self._note, self.graded)

    def scale_up(self) -> None:
        """workers auto: ask the pool for another grader when the oldest unclaimed submission has waited
        scale_wait_s (at most once per scale_wait_s per grader: a new grader takes a while to start). Called
        between claims and, while grading, from the lease renewer (never both at once)."""
        if self.pool is None or not self.queue.pending_ids():
            return
        wait_s = self.settings.scale_wait_s
        if self._scaled_at is not None and self.clock() - self._scaled_at < wait_s:
            return
        if (waited := self.queue.oldest_wait(now())) < wait_s:
            return
        self._scaled_at = self.clock()
        try:
            job_id = self.pool.start()
        except Exception as e:  # a scheduler hiccup (or a limit): grading goes on, the next check tries again
            log.warning("could not start another grader: %s", e)
            return
        if job_id is not None:
            log.info("a submission has waited %.0f s: started grader job %s", waited, job_id)

    def leave_to_others(self) -> bool:
        """workers auto: whether this grader, idle for scale_idle_s, leaves the queue to the others. Under the
        graders' lock, another grader must be serving (a fresh heartbeat that is not `exited`) and the scheduler
        must still have another grader job; this one's heartbeat says `exited` before the lock is released, so
        two idle graders never both leave, and the last one stays. Asked at most every HEARTBEAT_S."""
        if self.pool is None or self.clock() - self._leave_checked_at < HEARTBEAT_S:  # the lock, the scheduler
            return False
        self._leave_checked_at = self.clock()
        try:
            with FileLock(str(self.sweep.graders / "leave.lock"), timeout=self.settings.lock_timeout_s):
                serving = [b for b in self.sweep.serving_graders() if b.holder != self.holder]
                if not serving or self.pool.alive() < 2:
                    return False
                self._state = "exited"
                self._note = f"idle for {self.settings.scale_idle_s:g} s; {len(serving)} other grader(s) serve"
                self._beat()
                return True
        except Timeout as e:
            self._held(e)
            return False

    def _held(self, e: Timeout) -> None:
        log.warning("lock %s held for %g s; skipping this round", e.lock_file, self.settings.lock_timeout_s)

    def sweep_finished(self) -> bool:
        """Every run has its result, nothing is pending, and no job still waits to complete its result (a run
        stopped at its budget's end writes its result before its wrap-up submission is enqueued)."""
        return (
            self.finished_runs.all()
            and not self.queue.pending_ids()
            and not any((s := self.sweep.status(r)) is not None and s.waiting_for_scores() for r in self.run_ids)
            and not any(self.final_due(r) for r in self.run_ids)
        )

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

    # ---------------------------------------------------------------- grading
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

    def grade(self, claim: Claim) -> LedgerEntry | None:
        entry, lease = claim.entry, claim.lease
        run = self.sweep.run(entry.run_id)
        task = self.task(run.task)
        fields = dict(
            submission_id=entry.submission_id,
            run_id=entry.run_id,
            seq=entry.seq,
            submitted_at=entry.submitted_at,
            claimed_at=lease.claimed_at,
            model_path=entry.model_path,
            task=task.name,
            protocol=run.protocol,
            evaluator_version=task.spec.evaluator_version,
            grader=self.holder,
            attempt=lease.attempt,
            generation=self.preset(run.model.name).record(),
            budget_used_s=entry.budget_used_s,
            tokens=entry.tokens,
            cost_usd=entry.cost_usd,
            snapshot_error=entry.snapshot_error,
            part=task.feedback_part(run.protocol),
            marked_final=entry.final,
        )
        t0 = now()
        self._state = "grading"
        renewing = threading.Event()
        renewer = threading.Thread(target=self._renew_loop, args=(entry.submission_id, renewing), daemon=True)
        renewer.start()
        try:
            if lease.attempt > self.settings.max_attempts:
                result = LedgerEntry(
                    **fields,
                    graded_at=now(),
                    status="invalid",
                    error=f"grading failed {lease.attempt - 1} times (the grader died while "
                    f"evaluating it); not retried",
                )
            elif entry.error is not None:
                result = LedgerEntry(**fields, graded_at=now(), status="invalid", error=entry.error)
            else:
                result = self._score(entry.artifact, run.model.name, task, fields, t0)
        except InfraError as e:
            log.error("cannot grade %s now (%s); retrying in %.0f s", entry.submission_id, e, INFRA_RETRY_S)
            while_full(lambda: self.queue.release(entry.submission_id, self.holder), f"releasing {entry.submission_id}")
            self._note = f"infrastructure error: {e}"
            self._stop.wait(INFRA_RETRY_S)
            return None
        finally:
            renewing.set()
            renewer.join()
            self._state = "idle"
        # a full file system: the score waits for room (its lease may expire meanwhile: the first record wins)
        if while_full(lambda: self.ledger.record(result), f"recording the score of {entry.submission_id}"):
            self.graded += 1
            self.refresh(entry.run_id)
            log.info(
                "graded %s: %s",
                entry.submission_id,
                f"{result.score:.2f}" if result.status == "scored" else f"invalid ({result.error})",
            )
        else:
            log.warning("%s was already recorded by another grader; keeping the first result", entry.submission_id)
        try:
            self.queue.finish(entry.submission_id)
        except Timeout as e:  # recorded: the next claim retires it
            self._held(e)
        except OSError as e:  # no room to move it to done/: recorded, the next claim retires it
            if not disk_full(e):
                raise
        # under `feedback: split` every frozen copy waits for the run's final scoring (`score_final` deletes them)
        if entry.artifact and not self.settings.keep_artifacts and fields["part"] != "feedback":
            try:
                shutil.rmtree(frozen_dir(entry.artifact, self.sweep.submissions), ignore_errors=True)
            except (UntrustedArtifact, OSError):
                log.warning("not deleting %s: not a frozen copy under %s", entry.artifact, self.sweep.submissions)
        return self.ledger.get(entry.submission_id) or result

    def refresh(self, run_id: str) -> None:
        """Fold what was graded after the run's result was written (by its job, or by reaping a lost run) into it."""
        try:
            refreshed = while_full(lambda: refresh_result(self.sweep, run_id), f"updating the result of {run_id}")
        except Timeout as e:  # the next score of the run folds this one in too
            self._held(e)
            return
        if refreshed is not None:
            self.on_result(self.sweep, run_id, refreshed)

    def _score(self, artifact: str, model_name: str, task: Task, fields: dict, t0: float) -> LedgerEntry:
        base = self.baseline(task.name, model_name, fields["protocol"])
        try:
            frozen = check_frozen(artifact, self.sweep.submissions)
            # now: the frozen copy is deleted once graded; the run report reads what was found from the ledger
            leaks = scan_files(frozen, markers(task.data(self.data_root).heldout_dir))
        except (UntrustedArtifact, OSError) as e:
            return LedgerEntry(
                **fields, graded_at=now(), status="invalid", error=f"refused: {e}", eval_seconds=now() - t0
            )
        if leaks:
            log.warning("LEAK in %s: %s", fields["submission_id"], "; ".join(leaks))
        fields = {**fields, "leaks": leaks}
        try:
            scanned = stream(frozen)  # the one read of its weights: content hash and lineage samples
            digest = scanned.digest
            copy = digest == base.weights_hash
            if copy and base.status == "ok":
                return LedgerEntry(
                    **fields,
                    graded_at=now(),
                    status="scored",
                    score=base.score,
                    n_items=n_items(task, fields["part"], base.details),
                    weights_hash=digest,
                    copy_of_base=True,
                    lineage=copy_lineage(),
                    eval_seconds=now() - t0,
                )
            preset = self.preset(model_name)
            settings = self.engine.settings
            key = grading_key(
                digest,
                engine_key(frozen, Path(base.model_path)),
                task,
                fields["protocol"],
                settings,
                preset,
                self.settings.task_options.get(task.name),
                fields["part"],
            )
            earlier = self._graded(key)
            # equal keys: the same weights against the same base, so the earlier entry's lineage holds (computing
            # it again streams every tensor: ~20 s per GB here)
            if earlier is not None and earlier.lineage is not None:
                descent = earlier.lineage
            else:
                descent = (
                    copy_lineage()
                    if copy
                    else submission_lineage(frozen, scanned, base, self.sweep, self.settings.lock_timeout_s)
                )
            fields = {**fields, "weights_hash": digest, "lineage": descent}
            if descent.verdict == "foreign":
                log.warning("FOREIGN model in %s: %s", fields["submission_id"], descent.summary())
                if self.settings.foreign == "refuse":
                    return LedgerEntry(
                        **fields,
                        graded_at=now(),
                        status="invalid",
                        error=f"refused: foreign model (grader.foreign: refuse): {descent.summary()}",
                        eval_seconds=now() - t0,
                    )
            fields = {**fields, "backend": settings.record(), "grading_key": key}
            if earlier is not None:
                return LedgerEntry(
                    **fields,
                    graded_at=now(),
                    status="scored",
                    score=earlier.score,
                    details=earlier.details,
                    n_items=earlier.n_items,
                    cached_from=earlier.submission_id,
                    eval_seconds=now() - t0,
                )
            score, details = self.evaluate(
                task, frozen, Path(base.model_path), fields["protocol"], preset, fields["part"]
            )
        except InfraError:
            raise
        except Exception as e:  # the submission's fault (unloadable weights...): invalid, not a crash
            if disk_full(e):  # the grader's file system, not the submission
                raise InfraError(f"no space left to evaluate it: {e}") from e
            return LedgerEntry(
                **fields,
                graded_at=now(),
                status="invalid",
                error=f"could not evaluate the model: {type(e).__name__}: {e}",
                eval_seconds=now() - t0,
            )
        return LedgerEntry(
            **fields,
            graded_at=now(),
            status="scored",
            score=score,
            eval_seconds=now() - t0,
            details=details,
            n_items=n_items(task, fields["part"], details),
            engine=self.engine.last,
        )

    # ---------------------------------------------------------------- the final part (feedback: split)
    def final_due(self, run_id: str) -> bool:
        """Whether the run's selected submission awaits its one final-part score: the run uses `feedback:
        split`, has ended (a verified result; its job no longer waits for scores), every submission it made is
        recorded, one of them scored, and no final entry exists yet. Never before the run has ended: until then
        its ledger entries name the feedback part only."""
        if run_id in self._final_settled or run_id not in self.finished_runs:  # the cheap checks first: polled
            return False
        run = self.sweep.run(run_id)
        if self.task(run.task).feedback_mode(run.protocol) != "split" or self.ledger.final(run_id) is not None:
            self._final_settled.add(run_id)
            return False
        status = self.sweep.status(run_id)
        if (status is not None and status.waiting_for_scores()) or any(
            sid.rsplit(".", 1)[0] == run_id for sid in self.queue.pending_ids()
        ):
            return False
        entries = self.ledger.entries(run_id)
        if len(entries) < self.queue.count(run_id):
            return False
        if not any(e.status == "scored" for e in entries):
            self._final_settled.add(run_id)  # nothing to select
            return False
        return True

    def score_final(self, run_id: str) -> LedgerEntry | None:
        """Score the run's selected submission (grader.final) on the final part, record it once (the first of
        racing graders wins), fold it into the run's result and delete the run's frozen copies."""
        run = self.sweep.run(run_id)
        task = self.task(run.task)
        pick, rule = select_final([e for e in self.ledger.entries(run_id) if e.status == "scored"], self.settings.final)
        base = self.baseline(task.name, run.model.name, run.protocol)
        t0 = now()
        self._state = "grading"
        fields = dict(
            part="final",
            selected_by=rule,
            claimed_at=t0,
            grader=self.holder,
            attempt=1,
            n_items=n_items(task, "final", {}),
            cached_from=None,
            grading_key=None,  # the pick's is its feedback part's: never a cache hit for the final part
            engine=None,
            details={},
            error=None,
        )
        try:
            if pick.copy_of_base and base.status == "ok" and base.final_score is not None:
                update = dict(score=base.final_score)
            else:
                frozen = check_frozen(str(self.sweep.submissions / pick.submission_id), self.sweep.submissions)
                preset = self.preset(run.model.name)
                score, details = self.evaluate(task, frozen, Path(base.model_path), run.protocol, preset, "final")
                update = dict(score=score, details=details, engine=self.engine.last)
            update["status"] = "scored"
        except InfraError as e:
            log.error("cannot score the final part of %s now (%s); retrying in %.0f s", run_id, e, INFRA_RETRY_S)
            self._note = f"infrastructure error: {e}"
            self._stop.wait(INFRA_RETRY_S)
            return None
        except Exception as e:  # its weights are gone or do not load: the run has no final score, and says why
            if disk_full(e):
                log.error(
                    "cannot score the final part of %s now (no space: %s); retrying in %.0f s", run_id, e, INFRA_RETRY_S
                )
                self._stop.wait(INFRA_RETRY_S)
                return None
            update = dict(status="invalid", score=None, error=f"final part not scored: {type(e).__name__}: {e}")
        finally:
            self._state = "idle"
        final = pick.model_copy(update={**fields, **update, "graded_at": now(), "eval_seconds": now() - t0})
        if while_full(lambda: self.ledger.record_final(final), f"recording the final part of {run_id}"):
            log.info("final part of %s (%s, %s): %s", run_id, pick.submission_id, rule, final.score)
        self._final_settled.add(run_id)
        if not self.settings.keep_artifacts:  # before the result shows the final: then nothing is left to do
            for sid in (e.submission_id for e in self.ledger.entries(run_id)):
                try:
                    shutil.rmtree(frozen_dir(str(self.sweep.submissions / sid), self.sweep.submissions))
                except (UntrustedArtifact, OSError):
                    pass  # never frozen (an invalid submission), or already gone
        self.refresh(run_id)
        return self.ledger.final(run_id)

    def _graded(self, key: str) -> LedgerEntry | None:
        """An evaluated (not itself cached) scored entry with this grading key, by any grader of the sweep: the
        index is refreshed from the ledger when the key is not in it yet."""
        if key not in self._graded_keys:
            self._graded_keys.update(
                {
                    e.grading_key: e.submission_id
                    for e in self.ledger.all_entries()
                    if e.status == "scored" and e.grading_key and e.cached_from is None and not e.copy_of_base
                }
            )
        sid = self._graded_keys.get(key)
        return self.ledger.get(sid) if sid is not None else None

    def _renew_loop(self, sid: str, done: threading.Event) -> None:
        while not done.wait(self.settings.lease_s / 3):
            try:
                renewed = self.queue.renew(sid, self.holder, self.settings.lease_s)
            except Timeout as e:  # try again next time; the lease outlives a few missed renewals
                self._held(e)
                continue
            except OSError as e:
                if not disk_full(e):
                    raise
                log.warning("lease on %s not renewed: %s", sid, e.strerror)
                continue
            if not renewed:
                log.warning("lost the lease on %s; another grader may grade it too (first result wins)", sid)
                return
            self.scale_up()  # a long evaluation must not hide a backlog (the main loop checks between claims)


class GraderJob(submitit.helpers.Checkpointable):
    """The grader as a job: at its time limit submitit calls checkpoint() and requeues it (the submission it
    was grading is claimed again once its lease expires)."""

    def __init__(self, sweep_dir: str, index: int = 0, on_result: ResultHook = no_hook, pool: GraderPool | None = None):
        self.sweep_dir, self.index, self.on_result, self.pool = sweep_dir, index, on_result, pool

    def __call__(self) -> int:
        return run_grader(self.sweep_dir, self.index, self.on_result, self.pool)


def run_grader(sweep_dir: str, index: int = 0, on_result: ResultHook = no_hook, pool: GraderPool | None = None) -> int:
    """Serve the sweep's queue until the sweep is done."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    sweep = SweepDir(Path(sweep_dir))
    threads = sweep.spec.grader.cpus
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    return GradingDaemon(sweep, index, on_result, pool).run()
