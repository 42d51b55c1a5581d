"""The agent's budget clock. It stops while a submission waits for its score (grading time is not the
agent's), and it resumes from what a previous attempt used when a job is requeued."""

from __future__ import annotations

import threading
import time


class Budget:
    def __init__(self, total_s: float, used_before_s: float = 0.0):
        self.total_s = total_s
        self._used_before = used_before_s
        self._t0 = time.monotonic()
        self._paused_total = 0.0
        self._pauses = 0  # concurrent submissions each hold the clock
        self._paused_since = 0.0
        self._lock = threading.Lock()

    def used(self) -> float:
        with self._lock:
            t = time.monotonic()
            paused = self._paused_total + ((t - self._paused_since) if self._pauses else 0.0)
            return self._used_before + (t - self._t0) - paused

    def remaining(self) -> float:
        return max(0.0, self.total_s - self.used())

    def expired(self) -> bool:
        return self.used() >= self.total_s

    def pause(self) -> None:
        with self._lock:
            if self._pauses == 0:
                self._paused_since = time.monotonic()
            self._pauses += 1

    def resume(self) -> None:
        with self._lock:
            self._pauses -= 1
            if self._pauses == 0:
                self._paused_total += time.monotonic() - self._paused_since
