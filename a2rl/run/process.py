"""The agent process: started in its own session with an environment built from scratch (never the launcher's),
and stopped with everything it spawned: its process group, plus any descendant that escaped with `setsid`,
found by a per-run marker in its environment."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import time
from pathlib import Path

MARKER = "A2RL_RUN_TOKEN"


def _ignore_time_limit_signal() -> None:
    """Slurm sends the time-limit signal (USR2) to every process of the job; it is the run's to handle (by
    warning and stopping the agent), and its default action would kill the agent on the spot."""
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)


class AgentProcess:
    """One running agent. `stop()` leaves nothing of it behind."""

    def __init__(self, argv: list[str], *, env: dict[str, str], cwd: Path, log: Path):
        self.token = secrets.token_hex(8)
        self.log = open(log, "ab", buffering=0)
        self.proc = subprocess.Popen(argv, cwd=cwd, env={**env, MARKER: self.token}, stdin=subprocess.DEVNULL,
                                     stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
                                     preexec_fn=_ignore_time_limit_signal)

    def poll(self) -> int | None:
        return self.proc.poll()

    def signal(self, sig: int) -> None:
        for pid in self._pids():
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
        self.log.close()
        return self.proc.wait()

    def reap_strays(self) -> None:
        """After a normal exit: kill what the agent left running in the background."""
        if self._marked():
            self.stop(grace_s=2.0)
        self.log.close()

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
