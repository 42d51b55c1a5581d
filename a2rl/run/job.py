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

Its concerns are modules of their own: the attempt's state, heartbeat and signals (run/heartbeat.py), the
workspace kept for a resume and archived (run/resume.py), the wrap-up, auto-submit and the wait for scores
(run/wrapup.py), and the result (run/outcome.py).
"""

from __future__ import annotations

import logging
import os
import resource
import shutil
import socket
import sys
import threading
import time
import traceback
import urllib.parse
from pathlib import Path

from a2rl.drivers.endpoint import wait_for_endpoint
from a2rl.errors import SpecError
from a2rl.records import atomic_write_text, now, while_full
from a2rl.run.api import GradingAPI
from a2rl.run.budget import Budget
from a2rl.run.caps import RunCaps
from a2rl.run.environment import record_environment
from a2rl.run.isolation import choose
from a2rl.run.outcome import Outcome
from a2rl.run.process import AgentProcess
from a2rl.run.resume import Resuming
from a2rl.run.runsetup import RunSetup, agent_command, agent_environment, set_up
from a2rl.run.sandbox import AgentSandbox
from a2rl.run.submit import RunSubmitter
from a2rl.run.workspace import RunMeta, Workspace
from a2rl.run.wrapup import WrapUp, wait_for_grading
from a2rl.spec.agents import AgentStack, mode_text
from a2rl.spec.generation import get_preset
from a2rl.spec.sizing import workspace_gb
from a2rl.spec.sweep import local_driver_name
from a2rl.store.results import ResultHook, RunResult, load_result, no_hook, refresh_result
from a2rl.store.stages import STAGES_FILE, collect_stage_log
from a2rl.store.sweepdir import SweepDir
from a2rl.tasklib.leaks import read_canary
from a2rl.units import MIB
from a2rl.weights import parameter_count

log = logging.getLogger("a2rl.job")
STOP_GRACE_S = 10.0  # SIGTERM → SIGKILL for the agent
WRAP_UP_S = 60.0  # warning before the budget ends (at most 5% of the budget)
SIGNAL_GRACE_S = 20.0  # after a time-limit signal: warning → stop


class AgentRun(Resuming, WrapUp, Outcome):
    """One attempt of one run, inside its job: set-up (task data, model, workspace, a local driver), then the
    agent process in its sandbox against the run's grading API under the budget clock, then the result (written
    at once, completed while the job waits for the scores). SIGTERM interrupts it for a requeue to resume."""

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

    def _set_up(self) -> tuple[RunSetup, str, dict[str, str], list[tuple[str, int]]]:
        """Everything before the clock: the task, model and workspace (restored for a resumed run whose scratch
        lacks it), the instructions, and a local driver's server (waited for). Also the driver string, the
        endpoint variables for the stack and the ports the sandbox forwards."""
        run = self.run
        s = set_up(self.sweep, run, self.sweep.workspace(run.run_id))
        ws = s.ws
        self._restore_if_blank(ws)
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
        meta = self._start_clock(s)  # set-up ends here: the clock starts with the grading API the agent runs against

        def on_submit(_: dict) -> None:
            meta.last_submit_time = now()
            meta.dump(s.ws.meta_path)

        choice = choose(spec.isolation, spec.network)
        self._log(f"isolation: {choice.mode} ({choice.reason}); network: {spec.network}")
        caps = RunCaps(
            spec.limits,
            name=f"a2rl-{run.run_id}-{os.getpid()}",
            workspace=s.ws.root,
            gpus=spec.resources.gpus,
            mem_gb=spec.resources.mem_gb,
            sandboxed=choice.trusted,
            workspace_gb=workspace_gb(spec, parameter_count(s.model_dir)),
        )
        self._log(caps.describe())
        with (
            GradingAPI(
                self.submitter, self.budget, on_submit=on_submit, wrap_up=lambda: (s.ws.root / "WRAP_UP").exists()
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
            argv, env = self._agent_command(s, box, api, driver, endpoint_env)
            status, code = self._run_process(argv, env, s, caps, choice.trusted)
            meta.end_time = now()
            meta.dump(s.ws.meta_path)
            if s.stack.stage_records:
                collect_stage_log(s.ws.output / STAGES_FILE, self.dir / STAGES_FILE)
        return status, code

    def _start_clock(self, s: RunSetup) -> RunMeta:
        """The budget clock, the run's run_meta.json in the workspace, and its submitter."""
        spec, run = self.sweep.spec, self.run
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
            train_format=s.task.spec.train_format,
            protocol=run.protocol,
            chat_template_kwargs=get_preset(run.model.generation).chat_template_kwargs,
        )
        meta.dump(s.ws.meta_path)
        canary = read_canary(s.task.data(self.sweep.data_root()).heldout_dir)
        self.submitter = RunSubmitter(self.sweep, run, s.ws, self.budget, usage=self._usage, canary=canary)
        return meta

    def _agent_command(
        self, s: RunSetup, box: AgentSandbox, api: GradingAPI, driver: str, endpoint_env: dict[str, str]
    ) -> tuple[list[str], dict[str, str]]:
        """The agent's command line, wrapped for its sandbox, and its environment."""
        spec, run, ws, stack = self.sweep.spec, self.run, s.ws, s.stack
        env = agent_environment(
            box,
            stack,
            ws,
            run,
            cpus=spec.resources.cpus,
            url=api.url,
            driver=driver,
            python=s.python,
            endpoint_env=endpoint_env,
            stack_dir=s.stack_dir,
        )
        env["GRADING_TOKEN"] = api.token  # the API's credential: this agent's alone
        argv = stack.argv(
            run.agent.args,
            workspace=ws.root,
            driver=driver,
            seed=run.seed,
            stack_dir=s.stack_dir,
            python=s.python,
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
            box, stack, argv, ws, python=s.python, stack_dir=s.stack_dir, model_dir=s.model_dir, files=logins
        )
        return argv, env

    def _run_process(
        self, argv: list[str], env: dict[str, str], s: RunSetup, caps: RunCaps, sandboxed: bool
    ) -> tuple[str, int | None]:
        """The agent process, supervised to its end; what it used is recorded for the result."""
        limits = self.sweep.spec.limits
        cpu0 = _children_cpu()
        self.recorded["agent_started_at"] = now()
        try:
            proc = AgentProcess(
                argv,
                env=env,
                cwd=s.ws.code,
                log=self.dir / "agent.log",
                sandboxed=sandboxed,
                preexec=caps.preexec,
                log_cap=int(limits.agent_log_mb * MIB),
            )
            status, code = self._supervise(proc, s.ws, caps)
        finally:
            for line in caps.new_hits():  # hit in the agent's last moments
                self._log(f"cap hit: {line}")
            caps.close()
        if proc.log_cut:
            caps.note(f"agent_log: cut at limits.agent_log_mb={limits.agent_log_mb:g}")
        self.recorded["caps_hit"] = caps.hit
        self.recorded.update(agent_ended_at=now(), cpu_seconds=round(_children_cpu() - cpu0, 3))
        return status, code

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
        """A relay turned a connection away: not in allow_hosts, refused by the site proxy, or past the cap."""
        if "limits.relay_connections" not in what:
            return self._log(f"network: refused {what}")
        caps.note(f"relay_connections: {what}")
        self._log(f"cap hit: relay refused {what}")


def _host_port(url: str) -> tuple[str, int]:
    parts = urllib.parse.urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or 80


def _children_cpu() -> float:
    """CPU seconds of this process's waited-for descendants (the agent and what it waited for)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


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
