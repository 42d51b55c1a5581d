"""Local driver LLMs: an open-weight model served behind an OpenAI-compatible API by a job of the sweep, so
agents that speak that API run without API keys (`drivers: [local:NAME]` with `local_drivers: {NAME: ...}`).

The server job writes `drivers/<name>/endpoint.json` (URL, key, served name, heartbeat) into the sweep
directory. A run with a local driver waits for a live endpoint with its budget paused, checks that it answers,
and hands it to its agent through the variables its stack's `openai_compatible` names. The server exits when
every run that uses it has a result, or when none of them has been running for `grader.idle_timeout_s`; at its
time limit it requeues itself (submitit Checkpointable) and a relaunch replaces one that is gone.

The server answers every agent CLI in its own protocol (chatserver.py, protocols.py, toolcalls.py: Anthropic
Messages, OpenAI Responses and Chat Completions, Gemini, tool calls included), whichever backend generates:
`transformers` (in process: CPU, small models, tests) or `vllm` (GPU): vLLM's OpenAI-compatible server in a child
process on loopback with a key of its own, which our server calls (`/v1/completions` with the prompt rendered on
the chat template, as token ids: vllmclient.py); only our server is advertised. vLLM itself has not run here,
only a stand-in of its HTTP API (tests/fakes.py RecordingVLLMServer). Under Slurm our server listens on every
interface and advertises the node's hostname, so agents on other nodes reach it; the random API key keeps other
users out. Locally it stays on loopback.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.error import URLError

import submitit

from a2rl.drivers.endpoint import DriverEndpoint, endpoint_path
from a2rl.errors import InfraError
from a2rl.records import now
from a2rl.siteproxy import urlopen
from a2rl.spec.agents import cli_flags
from a2rl.spec.sweep import LocalDriver, driver_python, local_driver_name
from a2rl.store.modeldirs import resolve_model
from a2rl.store.results import FinishedRuns
from a2rl.store.sweepdir import HEARTBEAT_S, SweepDir
from a2rl.store.verdicts import inspection_path

log = logging.getLogger("a2rl.driver")


def _under_slurm() -> bool:
    return "SLURM_JOB_ID" in os.environ


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _vllm_server(spec: LocalDriver, model_dir: Path, served: str, key: str, log_path: Path) -> Iterator[int]:
    """vLLM's OpenAI-compatible server as a child process on loopback, where only the driver server calls it
    (its own key through VLLM_API_KEY, not argv, which other users of the node can read); yields its port once
    /health answers."""
    port = _free_port("127.0.0.1")
    argv = [
        str(driver_python(spec)),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--served-model-name",
        served,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *cli_flags(spec.args),
    ]
    log.info("starting vLLM: %s", " ".join(argv))
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(
            argv, env={**os.environ, "VLLM_API_KEY": key}, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + spec.startup_timeout_s
        while True:
            if proc.poll() is not None:
                tail = log_path.read_text(errors="replace")[-2000:]
                raise InfraError(f"vLLM exited with {proc.returncode} while starting:\n{tail}")
            try:
                with urlopen(f"http://127.0.0.1:{port}/health", timeout=5, direct=True):
                    break
            except (URLError, OSError):
                if time.monotonic() > deadline:
                    raise InfraError(f"vLLM did not answer /health within {spec.startup_timeout_s:g} s") from None
                time.sleep(2.0)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


@contextlib.contextmanager
def _serve(spec: LocalDriver, model_dir: Path, served: str, api_key: str, bind: str, log_path: Path) -> Iterator[int]:
    """Our protocol server (chatserver.py) on `bind`, generating in process (transformers) or through a private
    vLLM server; yields its port."""
    from a2rl.drivers.chatserver import LocalChatModel, serve

    with contextlib.ExitStack() as stack:
        if spec.backend == "vllm":
            from a2rl.drivers.vllmclient import VLLMChatModel

            key = secrets.token_urlsafe(24)
            port = stack.enter_context(_vllm_server(spec, model_dir, served, key, log_path))
            backend = VLLMChatModel(
                model_dir, f"http://127.0.0.1:{port}", served, key, context=spec.args.get("max_model_len")
            )
        else:
            backend = LocalChatModel(model_dir, served, fit_prompt=True)
        url = stack.enter_context(serve(backend, api_key=api_key, host=bind))
        yield int(url.rsplit(":", 1)[1].split("/", 1)[0])


class DriverServer:
    def __init__(self, sweep: SweepDir, name: str):
        self.sweep, self.name = sweep, name
        self.spec = sweep.spec.local_drivers[name]
        inspector = sweep.spec.inspector
        self.judges = inspector is not None and inspector.driver == name  # the inspector's judge of every run
        self.runs = [r for r in sweep.runs() if self.judges or local_driver_name(r.driver) == name]
        self.finished_runs = FinishedRuns(sweep, [r.run_id for r in self.runs])
        self.endpoint: DriverEndpoint | None = None
        self._stop = threading.Event()

    def finished(self) -> bool:
        """Every run using it has its result, and, where it is the inspector's judge, its inspection (which the
        run's job asks for after the result; one that never comes ends the server at its idle timeout)."""
        return self.finished_runs.all() and (
            not self.judges or all(inspection_path(self.sweep.run_dir(r.run_id)).exists() for r in self.runs)
        )

    def _beat(self, **update) -> None:
        assert self.endpoint is not None
        self.endpoint = self.endpoint.model_copy(update={"heartbeat_at": now(), **update})
        self.endpoint.dump(endpoint_path(self.sweep, self.name))

    def run(self) -> int:
        model_dir = resolve_model(self.spec.model)
        served = self.spec.served_name or self.name
        api_key = secrets.token_urlsafe(24)
        slurm = _under_slurm()
        bind, host = ("0.0.0.0", socket.gethostname()) if slurm else ("127.0.0.1", "127.0.0.1")
        log_path = self.sweep.drivers / self.name / f"server-{os.getpid()}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with _serve(self.spec, model_dir, served, api_key, bind, log_path) as port:
            self.endpoint = DriverEndpoint(
                name=self.name,
                base_url=f"http://{host}:{port}/v1",
                api_key=api_key,
                model=served,
                backend=self.spec.backend,
                host=socket.gethostname(),
                pid=os.getpid(),
                started_at=now(),
                heartbeat_at=now(),
                state="serving",
            )
            self._beat()
            log.info(
                "local driver %s (%s, %s) serving at %s",
                self.name,
                self.spec.backend,
                model_dir,
                self.endpoint.base_url,
            )
            note, idle_since, last_beat = "", time.monotonic(), time.monotonic()
            idle_s = self.sweep.spec.grader.idle_timeout_s
            try:
                while True:
                    if self.finished():
                        note = "every run using it has finished"
                        break
                    if self.finished_runs.any_at_work():
                        idle_since = time.monotonic()
                    elif time.monotonic() - idle_since > idle_s:
                        note = f"no run using it was running or deferred for {idle_s:g} s"
                        break
                    if time.monotonic() - last_beat >= HEARTBEAT_S:
                        self._beat()
                        last_beat = time.monotonic()
                    time.sleep(1.0)
            finally:
                self._beat(state="exited", note=note or "stopped")
                log.info("local driver %s exits (%s)", self.name, note or "stopped")
        return 0


class DriverServerJob(submitit.helpers.Checkpointable):
    """The server as a job; requeued at its time limit (runs using it wait for the new endpoint)."""

    def __init__(self, sweep_dir: str, name: str):
        self.sweep_dir, self.name = sweep_dir, name

    def __call__(self) -> int:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
        return DriverServer(SweepDir(Path(self.sweep_dir)), self.name).run()
