"""The agent process: started in its own session with an environment built from scratch (never the launcher's),
and stopped with everything it spawned: its process group, plus any descendant that escaped with `setsid`,
found by a per-run marker in its environment. A sandboxed agent (its argv starts its sandbox) also ends with
the sandbox: killing the sandbox's process ends every process in its PID namespace, marked or not.

Its output goes through a pipe that this process copies to the log, so no descriptor the agent holds leads to
a file in the sweep directory."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable

from a2rl.records import disk_full

MARKER = "A2RL_RUN_TOKEN"


def _ignore_time_limit_signal() -> None:
    """Slurm sends the time-limit signal (USR2) to every process of the job; it is the run's to handle (by
    warning and stopping the agent), and its default action would kill the agent on the spot."""
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)


class AgentProcess:
    """One running agent. `stop()` leaves nothing of it behind."""

    def __init__(
        self,
        argv: list[str],
        *,
        env: dict[str, str],
        cwd: Path,
        log: Path,
        sandboxed: bool = False,
        preexec: Callable[[], None] = lambda: None,
        log_cap: int | None = None,
    ):
        """`preexec` runs in the child before it execs (caps.py: cgroups, rlimits); the log takes at most
        `log_cap` bytes of the agent's output (then a marker, and the rest is read and dropped)."""
        self.token = secrets.token_hex(8)
        self.sandboxed = sandboxed
        self.log = open(log, "ab", buffering=0)
        self.log_left = None if log_cap is None else max(0, log_cap - self.log.tell())
        self.log_cut = False
        self.log_dropped = 0  # bytes not written for lack of space, noted in the log once there is room

        def child() -> None:
            _ignore_time_limit_signal()
            preexec()

        self.proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env={**env, MARKER: self.token},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=child,
        )
        self._copier = threading.Thread(target=self._copy_output, args=(log_cap,), daemon=True)
        self._copier.start()

    def _copy_output(self, cap: int | None) -> None:
        assert self.proc.stdout is not None
        while chunk := self.proc.stdout.read1(65536):
            if self.log_left is None or len(chunk) <= self.log_left:
                self._write(chunk)
                self.log_left = None if self.log_left is None else self.log_left - len(chunk)
            elif not self.log_cut:  # past the cap: a marker once, then keep draining so the agent never blocks
                self._write(
                    chunk[: self.log_left]
                    + f"\n[a2rl] agent.log cut here: the agent's output passed "
                    f"limits.agent_log_mb ({cap} bytes); the rest is dropped\n".encode()
                )
                self.log_left, self.log_cut = 0, True

    def _write(self, data: bytes) -> None:
        """To the log; on a full file system the output is dropped (and counted), never the copy stopped: an
        agent whose pipe is no longer drained blocks on its next print."""
        try:
            if self.log_dropped:
                note = f"\n[a2rl] {self.log_dropped} bytes of the agent's output dropped here: no space left\n"
                self.log.write(note.encode())
                self.log_dropped = 0
            self.log_dropped += len(data) - (self.log.write(data) or 0)
        except OSError as e:
            if not disk_full(e):
                raise
            self.log_dropped += len(data)

    def _close_log(self) -> None:
        self._copier.join(timeout=5.0)  # a stray of an unsandboxed agent may hold the pipe: do not wait on it
        self.log.close()

    def poll(self) -> int | None:
        return self.proc.poll()

    def signal(self, sig: int) -> None:
        pids = self._pids()
        if self.sandboxed and sig != signal.SIGKILL:
            # the sandbox's own processes would die of it and take the agent down at once, without its grace
            pids = {p for p in pids if _comm(p) != "bwrap" and p != self.proc.pid}
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def stop(self, grace_s: float = 10.0) -> int:
        """SIGTERM, then SIGKILL after `grace_s`, to the agent and every process carrying its marker."""
        self.signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and (self.proc.poll() is None or self._marked()):
            time.sleep(0.1)
        while self._pids():
            self.signal(signal.SIGKILL)
            time.sleep(0.05)
            self.proc.poll()
        self._close_log()
        return self.proc.wait()

    def reap_strays(self) -> None:
        """After a normal exit: kill what the agent left running in the background."""
        if self._marked():
            self.stop(grace_s=2.0)
        if not self.log.closed:
            self._close_log()

    def _pids(self) -> set[int]:
        pids = self._marked()
        if self.proc.poll() is None:
            pids.add(self.proc.pid)
        return pids

    def _marked(self) -> set[int]:
        needle = f"{MARKER}={self.token}".encode()
        found = set()
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/environ", "rb") as f:
                    if needle in f.read().split(b"\0"):
                        found.add(int(entry.name))
            except OSError:  # gone, or not ours
                continue
        found.discard(os.getpid())
        return found


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""
