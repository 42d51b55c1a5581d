"""The state of one attempt of a run inside its job, its heartbeat (status.json, with the budget used so far) and
the scheduler's signals: USR2 (the time limit is near) and SIGTERM (preemption, requeue, cancel)."""

from __future__ import annotations

import logging
import signal
import socket
import threading
import time

from a2rl.records import disk_full, now, while_full
from a2rl.run.budget import Budget
from a2rl.run.environment import job_identity
from a2rl.spec.clusters import SIGNAL_DELAY_S
from a2rl.store.results import ResultHook, no_hook
from a2rl.store.sweepdir import HEARTBEAT_S, RunStatus, SweepDir

log = logging.getLogger("a2rl.job")


class RunState:
    """One attempt's state: AgentRun (run/job.py) adds the agent, the wrap-up and the result."""

    def __init__(self, sweep: SweepDir, run_id: str, on_result: ResultHook = no_hook):
        self.sweep, self.run = sweep, sweep.run(run_id)
        self.on_result = on_result  # told of the result as written, and again once the scores are in
        self.dir = sweep.run_dir(run_id)
        self.t0 = time.monotonic()  # the attempt's start: set-up lasts until the agent process starts
        prev = sweep.status(run_id)
        self.attempt = (prev.attempt if prev else 0) + 1
        self.used_before = prev.agent_seconds if prev else 0.0
        self.uncharged_before = prev.uncharged_seconds if prev else 0.0
        self.setup_before = prev.setup_seconds if prev else []
        self.budget: Budget | None = None  # created as the agent starts: set-up is not the agent's time
        self.setup_s: float | None = None  # this attempt's, once the agent started
        self.started_at = now()
        self.state = "running"
        self.executor, self.job_id = job_identity()
        self._stop = threading.Event()
        self._time_limit_at: float | None = None  # monotonic time the scheduler's USR2 arrived
        self._terminated = threading.Event()
        self.stack = None  # the AgentStack, once the run is set up
        self.recorded: dict = {}  # RunResult's agent_started_at, agent_ended_at, cpu_seconds, caps_hit
        self.quota_reason: str | None = None  # why the run was stopped past a cap

    # ---------------------------------------------------------------- status
    def beat(self) -> None:
        """The run's status now; on a full file system it waits for room (a stale heartbeat is only a late one:
        the follower judges a run by its job, not its heartbeat's age)."""
        status = RunStatus(
            run_id=self.run.run_id,
            state=self.state,
            job_id=self.job_id,
            executor=self.executor,
            attempt=self.attempt,
            host=socket.gethostname(),
            heartbeat_at=now(),
            agent_seconds=self.agent_seconds(),
            uncharged_seconds=self.uncharged_seconds(),
            setup_seconds=self.setup_by_attempt(),
        )
        while_full(lambda: status.dump(self.dir / "status.json"), f"{self.run.run_id}: its status")

    def agent_seconds(self) -> float:
        return self.budget.used() if self.budget is not None else self.used_before

    def uncharged_seconds(self) -> float:
        return self.budget.uncharged() if self.budget is not None else self.uncharged_before

    def setup_by_attempt(self) -> list[float]:
        this = self.setup_s if self.setup_s is not None else time.monotonic() - self.t0
        return [*self.setup_before, round(this, 3)]

    def _beat_loop(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            self.beat()

    def _log(self, msg: str) -> None:
        try:
            with open(self.dir / "agent.log", "a", errors="backslashreplace") as f:  # any file name the agent chose
                f.write(f"[a2rl {time.strftime('%H:%M:%S')}] {msg}\n")
        except OSError as e:  # the job's own log has it then
            if not disk_full(e):
                raise
            log.warning("not in agent.log (%s): %s", e.strerror, msg)

    # ---------------------------------------------------------------- signals
    def install_signal_handlers(self) -> None:
        """Replace submitit's: a time limit ends the run (wrap-up), SIGTERM interrupts it (to be resumed)."""
        signal.signal(signal.SIGUSR2, lambda *_: setattr(self, "_time_limit_at", time.monotonic()))
        signal.signal(signal.SIGTERM, lambda *_: self._terminated.set())

    def _last_beat(self, beater: threading.Thread, state: str) -> None:
        """The job's final state; no periodic beat of an earlier state can land after it."""
        self._stop.set()
        beater.join()
        self.state = state
        self.beat()

    def _kill_at(self) -> float | None:
        """When the scheduler kills the job (monotonic), once its time-limit signal has arrived."""
        if self._time_limit_at is None:
            return None
        return self._time_limit_at + (SIGNAL_DELAY_S if self.executor == "slurm" else 30)
