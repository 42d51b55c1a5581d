"""One agent run, as executed inside its job (local process or Slurm job, via submitit).

Lays out the workspace, serves the grading API on loopback, runs the agent under its budget clock, stops it
with everything it spawned, waits for its submissions to be scored, and writes the run's result.

Ending: at the budget's end, or on the scheduler's time-limit signal (USR2), the agent is warned (a
`WRAP_UP` file, `wrap_up` in /time), stopped after a grace period, its last saved model that was not scored yet
is submitted for it, and the run ends as "timeout". On SIGTERM (preemption, `scontrol requeue`, cancel) the
agent is stopped and the budget used so far is saved, so a requeued job resumes the same run in the same
workspace with what is left of the budget.
"""

from __future__ import annotations

import logging
import os
import resource
import signal
import socket
import sys
import threading
import time
import traceback
from pathlib import Path

from a2rl.spec.agents import AgentStack, agent_registry, mode_text
from a2rl.run.process import AgentProcess
from a2rl.store.baselines import baseline_path
from a2rl.run.budget import Budget
from a2rl.drivers.endpoint import wait_for_endpoint
from a2rl.spec.clusters import SIGNAL_DELAY_S
from a2rl.spec.models import resolve_model
from a2rl.recording.archive import archive_workspace
from a2rl.recording.transcripts import parse_usage
from a2rl.records import atomic_write_text, now
from a2rl.run.environment import job_identity, record_environment
from a2rl.spec.registry import HOME
from a2rl.store.results import RunResult, load_result, result_from_ledger, write_result
from a2rl.reporting.runreport import write_run_report
from a2rl.run.api import GradingAPI
from a2rl.run.submit import RunSubmitter
from a2rl.spec.sweep import local_driver_name
from a2rl.store.sweepdir import HEARTBEAT_S, RunStatus, SweepDir
from a2rl.spec.tasks import get_task
from a2rl.run.workspace import RunMeta, Workspace, agent_env, create_workspace

log = logging.getLogger("a2rl.job")
STOP_GRACE_S = 10.0  # SIGTERM → SIGKILL for the agent
WRAP_UP_S = 60.0  # warning before the budget ends (at most 5% of the budget)
SIGNAL_GRACE_S = 20.0  # after a time-limit signal: warning → stop


class AgentRun:
    def __init__(self, sweep: SweepDir, run_id: str):
        self.sweep, self.run = sweep, sweep.run(run_id)
        self.dir = sweep.run_dir(run_id)
        prev = sweep.status(run_id)
        self.attempt = (prev.attempt if prev else 0) + 1
        self.budget = Budget(self.run.budget_s, prev.agent_seconds if prev else 0.0,
                             uncharged_cap_s=sweep.spec.grader.uncharged_wait_fraction * self.run.budget_s)
        self.started_at = now()
        self.state = "running"
        self.executor, self.job_id = job_identity()
        self._stop = threading.Event()
        self._time_limit_at: float | None = None  # monotonic time the scheduler's USR2 arrived
        self._terminated = threading.Event()
        self.stack = None  # the AgentStack, once the run is set up
        self.recorded: dict = {}  # RunResult's agent_started_at, agent_ended_at, cpu_seconds

    # ---------------------------------------------------------------- status
    def beat(self) -> None:
        RunStatus(run_id=self.run.run_id, state=self.state, job_id=self.job_id, executor=self.executor,
                  attempt=self.attempt, host=socket.gethostname(), heartbeat_at=now(),
                  agent_seconds=self.budget.used()).dump(self.dir / "status.json")

    def _beat_loop(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            self.beat()

    def _log(self, msg: str) -> None:
        with open(self.dir / "agent.log", "a") as f:
            f.write(f"[a2rl {time.strftime('%H:%M:%S')}] {msg}\n")

    # ---------------------------------------------------------------- signals
    def install_signal_handlers(self) -> None:
        """Replace submitit's: a time limit ends the run (wrap-up), SIGTERM interrupts it (to be resumed)."""
        signal.signal(signal.SIGUSR2, lambda *_: setattr(self, "_time_limit_at", time.monotonic()))
        signal.signal(signal.SIGTERM, lambda *_: self._terminated.set())

    # ---------------------------------------------------------------- the run
    def execute(self) -> RunResult | None:
        self.beat()
        record_environment(self.dir / f"env-{self.attempt}.json", self.attempt)
        threading.Thread(target=self._beat_loop, daemon=True).start()
        status, reason, exit_code = "failed", None, None
        try:
            status, exit_code = self._run_agent()
        except Exception:
            reason = "run set-up or supervision failed:\n" + traceback.format_exc(limit=6)
            log.exception("run %s failed", self.run.run_id)
        self.budget.pause()  # the agent is done: waiting for its scores below is not its time
        if status == "interrupted":
            self.state = "interrupted"
            self.beat()
            self._stop.set()
            return None
        self.state = "finishing"
        self.beat()
        result = self._result(status, reason, exit_code)
        self._archive_workspace()
        report(self.sweep, self.run.run_id, result)
        write_result(self.sweep, result)
        self._stop.set()
        return result

    def _run_agent(self) -> tuple[str, int | None]:
        spec, run = self.sweep.spec, self.run
        task = get_task(run.task, [Path(p) for p in spec.task_paths])
        data = task.ensure_prepared(self.sweep.data_root())
        model_dir = resolve_model(run.model.path)
        ws = create_workspace(self.sweep.workspace(run.run_id), task=task, data=data, model_dir=model_dir,
                              budget_s=run.budget_s, source_tree=HOME)
        (ws.root / "WRAP_UP").unlink(missing_ok=True)  # a resumed run starts unwarned
        meta = RunMeta(run_id=run.run_id, task=run.task, start_time=self.started_at, timeout_s=run.budget_s)
        meta.dump(ws.meta_path)
        agents = agent_registry([Path(p) for p in spec.agent_paths])
        self.stack = stack = agents.get(run.agent.name)
        # the prompt mode's text joins the rules; CLIs that read a file from their working directory get it all
        rules = f"{(ws.root / 'instructions.md').read_text().rstrip()}\n\n{mode_text(run.mode)}\n"
        atomic_write_text(ws.root / "instructions.md", rules)
        if stack.instructions_file:
            atomic_write_text(ws.code / stack.instructions_file, f"{task.description.rstrip()}\n\n{rules}")
        self.submitter = RunSubmitter(self.sweep, run, ws, self.budget)

        def on_submit(_: dict) -> None:
            meta.last_submit_time = now()
            meta.dump(ws.meta_path)

        driver, endpoint_env = run.driver, {}
        if (local := local_driver_name(run.driver)) is not None:
            driver, endpoint_env = self._connect_local_driver(local, stack)
        with GradingAPI(self.submitter, self.budget, on_submit=on_submit,
                        wrap_up=lambda: (ws.root / "WRAP_UP").exists()) as api:
            env = stack.env(agent_env(ws, task=run.task, model_name=run.model.name, url=api.url,
                                      cpus=spec.resources.cpus, passthrough=[*stack.passthrough_env,
                                                                             *stack.credentials]), driver)
            env.update(endpoint_env, GRADING_TOKEN=api.token)  # the API's credential: this agent's alone
            argv = stack.argv(run.agent.args, workspace=ws.root, driver=driver, seed=run.seed,
                              stack_dir=agents.path(run.agent.name).parent)
            self._log(f"attempt {self.attempt} on {socket.gethostname()}: {' '.join(argv)} "
                      f"(budget left {self.budget.remaining():.0f} s of {run.budget_s:g} s)")
            cpu0 = _children_cpu()
            self.recorded["agent_started_at"] = now()
            proc = AgentProcess(argv, env=env, cwd=ws.code, log=self.dir / "agent.log")
            status, code = self._supervise(proc, ws)
            self.recorded.update(agent_ended_at=now(), cpu_seconds=round(_children_cpu() - cpu0, 3))
            meta.end_time = now()
            meta.dump(ws.meta_path)
            if status == "timeout":
                self._auto_submit(ws)
        return status, code

    def _archive_workspace(self) -> None:
        """Keep what the agent left where the sweep is (node-local scratch goes with the job); never fails the run."""
        ws = self.sweep.workspace(self.run.run_id)
        settings = self.sweep.spec.recording
        if not settings.archive_workspace or not ws.is_dir() or self.sweep.root in ws.resolve().parents:
            return
        try:
            archive = archive_workspace(ws, self.dir / "workspace", self.run.run_id, settings)
            self._log(f"workspace archived to {self.dir / 'workspace'}: {len(archive.files)} files, "
                      f"{archive.total_bytes / 2**20:.1f} MiB ({len(archive.skipped)} skipped, see manifest.json)")
        except Exception:
            log.exception("archiving the workspace of %s failed", self.run.run_id)

    def _connect_local_driver(self, name: str, stack: AgentStack) -> tuple[str, dict[str, str]]:
        """Wait for the sweep's server of this driver (not the agent's time); the driver string and the
        endpoint variables for the stack."""
        self._log(f"waiting for local driver {name!r} (budget paused)")
        self.budget.pause()
        try:
            endpoint = wait_for_endpoint(self.sweep, name, self.sweep.spec.local_drivers[name].startup_timeout_s)
        finally:
            self.budget.resume()
        self._log(f"local driver {name!r}: model {endpoint.model!r} at {endpoint.base_url} ({endpoint.backend})")
        assert stack.openai_compatible is not None  # checked when the sweep was loaded
        return stack.openai_compatible.render(model=endpoint.model, base_url=endpoint.base_url,
                                              api_key=endpoint.api_key)

    def _supervise(self, proc: AgentProcess, ws: Workspace) -> tuple[str, int | None]:
        warn_before = min(WRAP_UP_S, 0.05 * self.run.budget_s)
        stop_at: float | None = None  # monotonic deadline set by a time-limit signal
        while (code := proc.poll()) is None:
            if self._terminated.is_set():
                self._log("SIGTERM (preemption, requeue or cancel): stopping the agent; the run resumes if requeued")
                proc.stop(grace_s=3.0)
                return "interrupted", None
            if self._time_limit_at is not None and stop_at is None:
                stop_at = self._time_limit_at + SIGNAL_GRACE_S
                self._warn(ws, f"the job's time limit is near: the agent is stopped in {SIGNAL_GRACE_S:g} s")
            if self.budget.remaining() <= warn_before and not (ws.root / "WRAP_UP").exists():
                self._warn(ws, f"the budget ends in {self.budget.remaining():.0f} s: save and submit now")
            if self.budget.expired() or (stop_at is not None and time.monotonic() >= stop_at):
                why = "budget used up" if self.budget.expired() else "job time limit"
                self._log(f"{why}: stopping the agent")
                return "timeout", proc.stop(STOP_GRACE_S)
            time.sleep(0.5)
        # Slurm signals every process of the job at once: an agent killed by the scheduler's SIGTERM is an
        # interruption, not the agent's own end, even if it died a moment before our handler ran.
        if code < 0 and self._terminated.wait(1.0):
            self._log("SIGTERM (preemption, requeue or cancel) ended the agent; the run resumes if requeued")
            proc.stop(grace_s=3.0)
            return "interrupted", None
        proc.reap_strays()
        return "ok", code

    def _warn(self, ws: Workspace, message: str) -> None:
        (ws.root / "WRAP_UP").write_text(message + "\n")
        self._log(f"wrap-up warning: {message}")

    def _auto_submit(self, ws: Workspace) -> None:
        """Submit the newest saved model that was not scored since it was last written (MLGym-style)."""
        candidate = last_saved_model(ws.output)
        if candidate is None:
            return
        newest = max(f.stat().st_mtime for f in candidate.iterdir())
        for entry in self.sweep.queue.entries(self.run.run_id):
            given = Path(entry.model_path)
            if (given if given.is_absolute() else ws.root / given).resolve() == candidate and entry.submitted_at >= newest:
                return
        self._log(f"auto-submitting {candidate} (saved, not yet scored)")
        self.submitter.submit(str(candidate), wait=False, force=True)

    def _result(self, status: str, reason: str | None, exit_code: int | None) -> RunResult:
        """Wait (bounded, and within the job's time limit) for the run's submissions and its baseline to be
        graded, then summarise the ledger. Scores that arrive later are added by the grader."""
        settings = self.sweep.spec.grader
        submitted = self.sweep.queue.count(self.run.run_id)
        bpath = baseline_path(self.sweep, self.run.task, self.run.model.name)
        wait_s = settings.max_wait_s
        if self._time_limit_at is not None:  # the scheduler kills the job SIGNAL_DELAY_S after its signal
            left = self._time_limit_at + (SIGNAL_DELAY_S if self.executor == "slurm" else 30) - 15 - time.monotonic()
            wait_s = min(wait_s, max(0.0, left))
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if len(self.sweep.ledger.entries(self.run.run_id)) >= submitted and bpath.exists():
                break
            time.sleep(settings.poll_s)
        usage = None if self.stack is None else \
            parse_usage(self.stack.transcript, (self.dir / "agent.log").read_text(errors="replace"))
        return result_from_ledger(self.sweep, self.run.run_id, status=status, failure_reason=reason,
                                  agent_exit_code=exit_code, agent_seconds=self.budget.used(),
                                  uncharged_seconds=round(self.budget.uncharged(), 1),
                                  started_at=self.started_at, ended_at=now(), usage=usage, **self.recorded)


def _children_cpu() -> float:
    """CPU seconds of this process's waited-for descendants (the agent and what it waited for)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def last_saved_model(output: Path) -> Path | None:
    """The most recently written directory under output/ (two levels deep) that holds safetensors weights."""
    dirs = {p.parent for pattern in ("*/*.safetensors", "*/*/*.safetensors") for p in output.glob(pattern)}
    dirs = [d.resolve() for d in dirs if (d / "config.json").exists()]
    return max(dirs, key=lambda d: max(f.stat().st_mtime for f in d.iterdir()), default=None)


def report(sweep: SweepDir, run_id: str, result: RunResult) -> None:
    """(Re)build the run's report; it is derived and can be rebuilt, so a failure is logged, never raised."""
    try:
        write_run_report(sweep, run_id, result)
    except Exception:
        log.exception("run report for %s failed", run_id)


def run_agent_job(sweep_dir: str, run_id: str) -> str:
    """Job entry point (submitit pickles this). Returns the run's final status."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    sweep = SweepDir(Path(sweep_dir))
    done = load_result(sweep, run_id)
    if done is not None:  # a requeued job whose run already finished
        return done.status
    run = AgentRun(sweep, run_id)
    run.install_signal_handlers()
    result = run.execute()
    if result is None:  # interrupted: leave at once, so a requeue starts the job again from the top
        logging.shutdown()
        sys.stdout.flush()
        os._exit(143)
    return result.status
