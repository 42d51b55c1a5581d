"""One agent run, as executed inside its job (local process or Slurm job, via submitit).

Lays out the workspace, serves the grading API on loopback, runs the agent under its budget clock (started with
the agent process: set-up before it is recorded apart), stops it with everything it spawned, writes the run's
result at once (submissions not graded yet listed), then waits for their scores within the job's time limit to
fold them in (the grader folds in those that land later).

Ending: at the budget's end, or on the scheduler's time-limit signal (USR2), the agent is warned (a
`WRAP_UP` file, `wrap_up` in /time), stopped after a grace period, its last saved model that was not scored yet
is submitted for it, and the run ends as "timeout". On SIGTERM (preemption, `scontrol requeue`, cancel) the
agent is stopped, the budget used so far is saved, and so are the workspace's code/, output/ and home/ (in the
sweep directory), so a requeued job resumes the same run with what is left of the budget, in its workspace or, on a
node whose scratch lacks it, in one restored from that copy.
"""

from __future__ import annotations

import logging
import os
import resource
import shutil
import signal
import socket
import sys
import threading
import time
import traceback
import urllib.parse
from pathlib import Path
from typing import Callable

from a2rl.errors import SpecError
from a2rl.spec.agents import AgentStack, mode_text
from a2rl.run.caps import RunCaps
from a2rl.run.process import AgentProcess
from a2rl.run.runsetup import RunSetup, agent_command, agent_environment, set_up
from a2rl.run.isolation import choose
from a2rl.run.sandbox import AgentSandbox
from a2rl.store.baselines import baseline_path
from a2rl.run.budget import Budget
from a2rl.drivers.endpoint import wait_for_endpoint
from a2rl.spec.clusters import SIGNAL_DELAY_S
from a2rl.spec.generation import get_preset
from a2rl.recording.archive import archive_workspace
from a2rl.recording.transcripts import cli_failure, parse_usage, transcript_files
from a2rl.records import atomic_write_text, disk_full, now, while_full
from a2rl.run.environment import job_identity, record_environment
from a2rl.store.results import AgentUsage, ResultHook, RunResult, load_result, no_hook, refresh_result, write_result
from a2rl.store.stages import STAGES_FILE, collect_stage_log
from a2rl.run.api import GradingAPI
from a2rl.run.submit import RunSubmitter
from a2rl.spec.sweep import local_driver_name
from a2rl.store.sweepdir import HEARTBEAT_S, RunStatus, SweepDir
from a2rl.run.workspace import RunMeta, Workspace, is_blank, restore_for_resume, save_for_resume

log = logging.getLogger("a2rl.job")
STOP_GRACE_S = 10.0  # SIGTERM → SIGKILL for the agent
WRAP_UP_S = 60.0  # warning before the budget ends (at most 5% of the budget)
SIGNAL_GRACE_S = 20.0  # after a time-limit signal: warning → stop
KILL_MARGIN_S = 15.0  # the grading wait ends this long before the scheduler kills the job


class AgentRun:
    """One attempt of one run, inside its job: set-up (task data, model, workspace, a local driver), then the
    agent process in its sandbox against the run's grading API under the budget clock, then the result (written
    at once, completed while the job waits for the scores). SIGTERM interrupts it for a requeue to resume."""

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

    # ---------------------------------------------------------------- the run
    def execute(self) -> RunResult | None:
        self.beat()
        record_environment(self.dir / f"env-{self.attempt}.json", self.attempt)
        beater = threading.Thread(target=self._beat_loop, daemon=True)
        beater.start()
        status, reason, exit_code = "failed", None, None
        try:
            status, exit_code = self._run_agent()
            if status == "quota":
                reason = self.quota_reason
        except SpecError as e:  # the user's to fix (a scratch root it cannot use...): their lines, no traceback
            reason = "run set-up failed: " + "; ".join(e.lines)
            self._log(reason)
        except Exception:
            reason = "run set-up or supervision failed:\n" + traceback.format_exc(limit=6)
            log.exception("run %s failed", self.run.run_id)
        if self.budget is not None:
            self.budget.pause()  # the agent is done: waiting for its scores below is not its time
        if status == "interrupted":
            self._save_for_resume()
            self._last_beat(beater, "interrupted")
            return None
        self.state = "finishing"
        self.beat()
        run_id = self.run.run_id
        result = self._write_result(status, reason, exit_code)  # before any wait: the job may be killed in it
        if status == "timeout" and self._auto_submit():  # after it: nothing in the workspace delays the result
            result = self._write_result(status, reason, exit_code)
        shutil.rmtree(self.sweep.resume_dir(run_id), ignore_errors=True)  # a run with a result never resumes
        self.on_result(self.sweep, run_id, result)
        self._archive_workspace()
        why = wait_for_grading(
            self._graded,
            max_wait_s=self.sweep.spec.grader.max_wait_s,
            poll_s=self.sweep.spec.grader.poll_s,
            kill_at=self._kill_at,
            terminated=self._terminated,
        )
        if why != "graded":
            self._log(f"stopped waiting for scores ({why}); the grader adds them to the result when they land")
        if (refreshed := while_full(lambda: refresh_result(self.sweep, run_id), f"{run_id}: its result")) is not None:
            result = refreshed
            self.on_result(self.sweep, run_id, result)
        self._last_beat(beater, "finished")
        return result

    def _last_beat(self, beater: threading.Thread, state: str) -> None:
        """The job's final state; no periodic beat of an earlier state can land after it."""
        self._stop.set()
        beater.join()
        self.state = state
        self.beat()

    def _set_up(self) -> tuple[RunSetup, str, dict[str, str], list[tuple[str, int]]]:
        """Everything before the clock: the task, model and workspace (restored for a resumed run whose scratch
        lacks it), the instructions, and a local driver's server (waited for). Also the driver string, the
        endpoint variables for the stack and the ports the sandbox forwards."""
        run = self.run
        s = set_up(self.sweep, run, self.sweep.workspace(run.run_id))
        ws = s.ws
        saved = self.sweep.resume_dir(run.run_id)
        if saved.is_dir() and is_blank(ws.root):  # saved only by an interrupted attempt; dropped at the end
            restore_for_resume(ws, saved)
            self._log(f"workspace restored from {saved} (this node's scratch did not have it)")
        (ws.root / "WRAP_UP").unlink(missing_ok=True)  # a resumed run starts unwarned
        self.stack = stack = s.stack
        # the prompt mode's text joins the rules; CLIs that read a file from their working directory get it all
        rules = f"{(ws.root / 'instructions.md').read_text().rstrip()}\n\n{mode_text(run.mode)}\n"
        atomic_write_text(ws.root / "instructions.md", rules)
        if stack.instructions_file:
            atomic_write_text(ws.code / stack.instructions_file, f"{s.task.description.rstrip()}\n\n{rules}")
        driver, endpoint_env, forwards = run.driver, {}, []
        if (local := local_driver_name(run.driver)) is not None:
            driver, endpoint_env, forwards = self._connect_local_driver(local, stack)
        return s, driver, endpoint_env, forwards

    def _run_agent(self) -> tuple[str, int | None]:
        """Set-up, then the clock: the grading API, the sandbox, the agent process and its supervision."""
        spec, run = self.sweep.spec, self.run
        s, driver, endpoint_env, forwards = self._set_up()
        task, model_dir, ws, stack, stack_dir, python = s.task, s.model_dir, s.ws, s.stack, s.stack_dir, s.python
        # set-up ends here: the clock starts with the grading API the agent process is started against
        self.budget = Budget(
            run.budget_s,
            self.used_before,
            uncharged_before_s=self.uncharged_before,
            uncharged_cap_s=spec.grader.uncharged_wait_fraction * run.budget_s,
        )
        self.setup_s = time.monotonic() - self.t0
        meta = RunMeta(
            run_id=run.run_id,
            task=run.task,
            start_time=now(),
            timeout_s=run.budget_s,
            train_format=task.spec.train_format,
            protocol=run.protocol,
            chat_template_kwargs=get_preset(run.model.generation).chat_template_kwargs,
        )
        meta.dump(ws.meta_path)
        self.submitter = RunSubmitter(self.sweep, run, ws, self.budget, usage=self._usage)

        def on_submit(_: dict) -> None:
            meta.last_submit_time = now()
            meta.dump(ws.meta_path)

        choice = choose(spec.isolation, spec.network)
        self._log(f"isolation: {choice.mode} ({choice.reason}); network: {spec.network}")
        caps = RunCaps(
            spec.limits,
            name=f"a2rl-{run.run_id}-{os.getpid()}",
            workspace=ws.root,
            gpus=spec.resources.gpus,
            mem_gb=spec.resources.mem_gb,
            sandboxed=choice.trusted,
        )
        self._log(caps.describe())
        with (
            GradingAPI(
                self.submitter, self.budget, on_submit=on_submit, wrap_up=lambda: (ws.root / "WRAP_UP").exists()
            ) as api,
            AgentSandbox(
                choice,
                spec.network,
                forwards=[_host_port(api.url), *forwards],
                allow_hosts=spec.allow_hosts,
                max_connections=spec.limits.relay_connections,
                limit=caps.inner_argv,
                on_refused=lambda t: self._refused(t, caps),
            ) as box,
        ):
            env = agent_environment(
                box,
                stack,
                ws,
                run,
                cpus=spec.resources.cpus,
                url=api.url,
                driver=driver,
                python=python,
                endpoint_env=endpoint_env,
                stack_dir=stack_dir,
            )
            env["GRADING_TOKEN"] = api.token  # the API's credential: this agent's alone
            argv = stack.argv(
                run.agent.args,
                workspace=ws.root,
                driver=driver,
                seed=run.seed,
                stack_dir=stack_dir,
                python=python,
                env=env,
            )
            self._log(
                f"attempt {self.attempt} on {socket.gethostname()}: {' '.join(argv)} "
                f"(budget left {self.budget.remaining():.0f} s of {run.budget_s:g} s)"
            )
            logins = (
                {ws.root / "home" / f.relative_to(Path.home()): f for f in stack.logins(Path.home())}
                if spec.agent_logins
                else {}
            )
            if logins:
                self._log(f"agent_logins: mounting {', '.join(map(str, logins.values()))} read-only into its HOME")
            argv = agent_command(
                box, stack, argv, ws, python=python, stack_dir=stack_dir, model_dir=model_dir, files=logins
            )
            cpu0 = _children_cpu()
            self.recorded["agent_started_at"] = now()
            try:
                proc = AgentProcess(
                    argv,
                    env=env,
                    cwd=ws.code,
                    log=self.dir / "agent.log",
                    sandboxed=choice.trusted,
                    preexec=caps.preexec,
                    log_cap=int(spec.limits.agent_log_mb * 2**20),
                )
                status, code = self._supervise(proc, ws, caps)
            finally:
                for line in caps.new_hits():  # hit in the agent's last moments
                    self._log(f"cap hit: {line}")
                caps.close()
            if proc.log_cut:
                caps.note(f"agent_log: cut at limits.agent_log_mb={spec.limits.agent_log_mb:g}")
            self.recorded["caps_hit"] = caps.hit
            self.recorded.update(agent_ended_at=now(), cpu_seconds=round(_children_cpu() - cpu0, 3))
            meta.end_time = now()
            meta.dump(ws.meta_path)
            if stack.stage_records:
                collect_stage_log(ws.output / STAGES_FILE, self.dir / STAGES_FILE)
        return status, code

    def _scratch_workspace(self) -> Path | None:
        """The run's workspace when it lies outside the sweep directory (scratch the job may not keep), else None."""
        try:
            ws = self.sweep.workspace(self.run.run_id)
        except SpecError:  # no usable scratch root: no workspace was made there
            return None
        return ws if ws.is_dir() and self.sweep.root not in ws.resolve().parents else None

    def _save_for_resume(self) -> None:
        """Keep what the agent made where the sweep is, for a requeue on a node without this node's scratch;
        never fails the interruption."""
        ws = self._scratch_workspace()
        if ws is None:
            return
        cap_mb = self.sweep.spec.recording.resume_max_mb
        try:
            copied, skipped = save_for_resume(Workspace(ws), self.sweep.resume_dir(self.run.run_id), cap_mb * 2**20)
        except Exception as e:
            if disk_full(e):
                log.error("the workspace of %s was not saved for resuming: %s", self.run.run_id, e)
            else:
                log.exception("saving the workspace of %s for resuming failed", self.run.run_id)
            return
        self._log(
            f"workspace saved for resuming: {copied / 2**20:.1f} MiB of code/, output/ and home/"
            + (
                f"; {len(skipped)} file(s) skipped, past recording.resume_max_mb={cap_mb:g}: "
                f"{', '.join(skipped[:5])}{' ...' if len(skipped) > 5 else ''}"
                if skipped
                else ""
            )
        )

    def _archive_workspace(self) -> None:
        """Keep what the agent left where the sweep is (node-local scratch goes with the job); never fails the run."""
        ws = self._scratch_workspace()
        settings = self.sweep.spec.recording
        if not settings.archive_workspace or ws is None:
            return
        try:
            archive = archive_workspace(ws, self.dir / "workspace", self.run.run_id, settings)
            self._log(
                f"workspace archived to {self.dir / 'workspace'}: {len(archive.files)} files, "
                f"{archive.total_bytes / 2**20:.1f} MiB ({len(archive.skipped)} skipped, see manifest.json)"
            )
        except Exception as e:
            if disk_full(e):
                self._log(f"workspace not archived: {e}")
            else:
                log.exception("archiving the workspace of %s failed", self.run.run_id)

    def _connect_local_driver(self, name: str, stack: AgentStack) -> tuple[str, dict[str, str], list[tuple[str, int]]]:
        """Wait for the sweep's server of this driver (set-up, before the budget starts); the driver string, the
        endpoint variables for the stack and the server's host:port (which the sandbox forwards)."""
        self._log(f"waiting for local driver {name!r} (set-up: the budget has not started)")
        endpoint = wait_for_endpoint(self.sweep, name, self.sweep.spec.local_drivers[name].startup_timeout_s)
        self._log(f"local driver {name!r}: model {endpoint.model!r} at {endpoint.base_url} ({endpoint.backend})")
        assert stack.openai_compatible is not None  # checked when the sweep was loaded
        server = _host_port(endpoint.base_url)
        base_url = endpoint.base_url
        if self.sweep.spec.network != "full":  # the sandbox relays it to its own loopback, at the same port
            base_url = base_url.replace(f"//{server[0]}:", "//127.0.0.1:", 1)
        driver, env = stack.openai_compatible.render(model=endpoint.model, base_url=base_url, api_key=endpoint.api_key)
        return driver, env, [server]

    def _supervise(self, proc: AgentProcess, ws: Workspace, caps: RunCaps) -> tuple[str, int | None]:
        warn_before = min(WRAP_UP_S, 0.05 * self.run.budget_s)
        stop_at: float | None = None  # monotonic deadline set by a time-limit signal
        measure_at = time.monotonic()  # the workspace's next measurement
        while (code := proc.poll()) is None:
            for line in caps.new_hits():
                self._log(f"cap hit: {line}")
            if time.monotonic() >= measure_at:
                measure_at = time.monotonic() + self.sweep.spec.limits.workspace_check_s
                if (why := caps.over_quota()) is not None:
                    self._log(f"{why}: stopping the agent (its graded submissions stand)")
                    self.quota_reason = why
                    return "quota", proc.stop(STOP_GRACE_S)
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

    def _refused(self, what: str, caps: RunCaps) -> None:
        """A relay turned a connection away: a host not in allow_hosts, or one past the cap."""
        if "limits.relay_connections" in what:
            caps.note(f"relay_connections: {what}")
            self._log(f"cap hit: relay refused {what}")
        else:
            self._log(f"network: refused {what}")

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

    def _kill_at(self) -> float | None:
        """When the scheduler kills the job (monotonic), once its time-limit signal has arrived."""
        if self._time_limit_at is None:
            return None
        return self._time_limit_at + (SIGNAL_DELAY_S if self.executor == "slurm" else 30)

    def _log_text(self) -> str:
        log_path = self.dir / "agent.log"
        return log_path.read_text(errors="replace") if log_path.exists() else ""

    def _usage(self) -> AgentUsage | None:
        """Tokens and cost in the transcript so far (the log, and the files the stack keeps its totals in)."""
        if self.stack is None:
            return None
        return parse_usage(
            self.stack.transcript,
            self._log_text()
            + transcript_files(self.sweep.workspace(self.run.run_id) / "home", self.stack.transcript_files),
        )

    def _write_result(self, status: str, reason: str | None, exit_code: int | None) -> RunResult:
        usage = self._usage()
        if self.stack is not None and reason is None and status in ("ok", "timeout"):
            # a CLI that crashed, hung or spoke gibberish
            reason = cli_failure(
                self.stack.transcript, self.stack.cli_name, self._log_text(), usage, status=status, exit_code=exit_code
            )
        setup = self.setup_by_attempt()
        return while_full(
            lambda: write_result(
                self.sweep,
                self.run.run_id,
                status=status,
                failure_reason=reason,
                agent_exit_code=exit_code,
                agent_seconds=self.agent_seconds(),
                started_at=self.started_at,
                ended_at=now(),
                usage=usage,
                setup_seconds=round(sum(setup), 3),
                uncharged_seconds=round(self.uncharged_seconds(), 1),
                setup_seconds_by_attempt=setup,
                **self.recorded,
            ),
            f"{self.run.run_id}: its result",
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


def _host_port(url: str) -> tuple[str, int]:
    parts = urllib.parse.urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or 80


def _children_cpu() -> float:
    """CPU seconds of this process's waited-for descendants (the agent and what it waited for)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def last_saved_model(output: Path) -> Path | None:
    """The most recently written directory under output/ (two levels deep) that holds safetensors weights."""
    dirs = {p.parent for pattern in ("*/*.safetensors", "*/*/*.safetensors") for p in output.glob(pattern)}
    dirs = [d.resolve() for d in dirs if (d / "config.json").exists()]
    return max(dirs, key=lambda d: max(f.stat().st_mtime for f in d.iterdir()), default=None)


def run_agent_job(sweep_dir: str, run_id: str, on_result: ResultHook = no_hook) -> str:
    """Job entry point (a2rl.scheduling.launcher.run_job wraps it for submitit). Returns the run's final status."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    sweep = SweepDir(Path(sweep_dir))
    done = load_result(sweep, run_id)
    if done is not None:  # a requeued job whose run already finished
        return done.status
    run = AgentRun(sweep, run_id, on_result)
    run.install_signal_handlers()
    result = run.execute()
    if result is None:  # interrupted: leave at once, so a requeue starts the job again from the top
        logging.shutdown()
        sys.stdout.flush()
        os._exit(143)
    return result.status
