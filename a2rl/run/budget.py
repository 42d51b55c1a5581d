"""The agent's budget clock, and the rule that keeps it from being frozen.

Two things stop it. `pause()`/`resume()`: the run's own waits, which the agent cannot cause (scores awaited
after the agent ended). `grading_wait()`: the run's single in-flight submission
waiting for its score. Grading time is not the agent's, but an agent that keeps a submission in flight while it
works on would otherwise never spend its budget; so grading waits are uncharged only up to `uncharged_cap_s`
in total (a fraction of the budget, reported as the result's uncharged_seconds) and charged past it. A second
concurrent wait and a wait after the budget ended are refused, decided under the clock's lock.

It resumes from what a previous attempt used, and from the uncharged time it already had, when a job is requeued.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class BudgetExhausted(Exception):
    pass


class WaitInFlight(Exception):
    pass


class Budget:
    """The run's budget clock (see the module docstring): `used()` counts agent time, `grading_wait()` is the one
    in-flight submission's capped uncharged wait, `pause()`/`resume()` the run's own waits."""

    def __init__(
        self,
        total_s: float,
        used_before_s: float = 0.0,
        *,
        uncharged_before_s: float = 0.0,
        uncharged_cap_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.total_s = total_s
        self.uncharged_cap_s = 0.5 * total_s if uncharged_cap_s is None else uncharged_cap_s
        self._clock = clock
        self._charged = used_before_s
        self._uncharged = uncharged_before_s  # grading waits not charged so far, earlier attempts' included
        self._last = clock()
        self._pauses = 0  # the run's own waits (nested)
        self._waiting = False  # a grading wait in flight
        self._lock = threading.Lock()

    def _advance(self) -> None:
        """Account the time since the last change; the caller holds the lock."""
        t = self._clock()
        dt, self._last = t - self._last, t
        if self._pauses:
            return
        free = min(dt, max(0.0, self.uncharged_cap_s - self._uncharged)) if self._waiting else 0.0
        self._uncharged += free
        self._charged += dt - free

    def used(self) -> float:
        with self._lock:
            self._advance()
            return self._charged

    def uncharged(self) -> float:
        with self._lock:
            self._advance()
            return self._uncharged

    def remaining(self) -> float:
        return max(0.0, self.total_s - self.used())

    def expired(self) -> bool:
        return self.used() >= self.total_s

    def pause(self) -> None:
        with self._lock:
            self._advance()
            self._pauses += 1

    def resume(self) -> None:
        with self._lock:
            self._advance()
            self._pauses -= 1

    @contextmanager
    def grading_wait(self) -> Iterator[None]:
        """The run's one submission waiting for its score; WaitInFlight if one already is, BudgetExhausted if
        the budget is spent (nothing may then be enqueued)."""
        with self._lock:
            self._advance()
            if self._waiting:
                raise WaitInFlight("a submission is already in flight: wait for its answer before submitting again")
            if self._charged >= self.total_s:
                raise BudgetExhausted(f"the budget of {self.total_s:g} s is used up; submissions are refused")
            self._waiting = True
        try:
            yield
        finally:
            with self._lock:
                self._advance()
                self._waiting = False
