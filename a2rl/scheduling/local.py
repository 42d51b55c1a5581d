"""Jobs as processes on this machine (submitit's local executor): a job's id is its controller's pid."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Callable, Iterable, Iterator

from a2rl.scheduling.base import JobState, Scheduler, Shape


class LocalScheduler(Scheduler):
    kind = "local"

    def submit(self, shape: Shape, fn: Callable, args: list[tuple]) -> list[str]:
        ex = self.executor(shape)
        with self._detached():
            return [str(ex.submit(fn, *a).job_id) for a in args]

    @contextlib.contextmanager
    def _detached(self) -> Iterator[None]:
        """Local jobs outlive the launcher: they must not hold its terminal (stdout pipes, Ctrl-C)."""
        log = self.folder / "local-controllers.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        saved = [os.dup(1), os.dup(2)]
        # inherited by the job processes; only the main thread may set it (a grader's lease renewer starting
        # another grader is not, and has no terminal to detach from)
        main = threading.current_thread() is threading.main_thread()
        old_int = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
        sys.stdout.flush(), sys.stderr.flush()
        with open(log, "ab") as f:
            os.dup2(f.fileno(), 1), os.dup2(f.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush(), sys.stderr.flush()
            os.dup2(saved[0], 1), os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            if main:
                signal.signal(signal.SIGINT, old_int)

    def states(self, job_ids: Iterable[str]) -> dict[str, JobState]:
        return {j: _pid_state(j) for j in job_ids}

    def cancel(self, job_ids: list[str]) -> None:
        for jid in job_ids:  # the local controller forwards SIGTERM to the job, which stops its agent
            try:
                os.kill(int(jid), signal.SIGTERM)
            except (ProcessLookupError, ValueError):
                pass


def _pid_state(job_id: str) -> JobState:
    try:
        os.kill(int(job_id), 0)
    except ProcessLookupError:
        return JobState(False, f"local job process {job_id} has exited", "EXITED")
    except (ValueError, PermissionError):
        return JobState(None)
    if _zombie(job_id):  # ended, not yet reaped by the launch that started it: as gone as an exited one
        return JobState(False, f"local job process {job_id} has exited", "EXITED")
    return JobState(True, state="RUNNING")


def _zombie(job_id: str) -> bool:
    try:  # /proc/PID/stat: "PID (COMM) STATE ..."; COMM may hold spaces and parentheses, STATE follows the last ")"
        return Path(f"/proc/{int(job_id)}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    except (OSError, IndexError):
        return False
