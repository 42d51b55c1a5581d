"""`grader.workers: auto`: a grader asks its pool (the scheduler's side, scheduling/graders.py) for another
grader when a submission has waited too long, and leaves the queue to the others when idle, never the last."""

from __future__ import annotations

import logging

from filelock import Timeout

from a2rl.grading.grader import Grader
from a2rl.records import now
from a2rl.store.locks import sweep_lock
from a2rl.store.sweepdir import HEARTBEAT_S

log = logging.getLogger("a2rl.grader")


class Scaling(Grader):
    """GradingDaemon's (grading/daemon.py) side of `grader.workers: auto`."""

    def scale_up(self) -> None:
        """workers auto: ask the pool for another grader when the oldest unclaimed submission has waited
        scale_wait_s (at most once per scale_wait_s per grader: a new grader takes a while to start). Called
        between claims and, while grading, from the lease renewer (never both at once)."""
        if self.pool is None or not self.queue.pending_ids():
            return
        wait_s = self.settings.scale_wait_s
        if self._scaled_at is not None and self.clock() - self._scaled_at < wait_s:
            return
        if (waited := self.queue.oldest_wait(now(), self.settings.lease_s)) < wait_s:
            return
        self._scaled_at = self.clock()
        try:
            job_id = self.pool.start()
        except Exception as e:  # a scheduler hiccup (or a limit): grading goes on, the next check tries again
            log.warning("could not start another grader: %s", e)
            return
        if job_id is not None:
            log.info("a submission has waited %.0f s: started grader job %s", waited, job_id)

    def leave_to_others(self) -> bool:
        """workers auto: whether this grader, idle for scale_idle_s, leaves the queue to the others. Under the
        graders' lock, another grader must be serving (a fresh heartbeat that is not `exited`) and the scheduler
        must still have another grader job; this one's heartbeat says `exited` before the lock is released, so
        two idle graders never both leave, and the last one stays. Asked at most every HEARTBEAT_S."""
        if self.pool is None or self.clock() - self._leave_checked_at < HEARTBEAT_S:  # the lock, the scheduler
            return False
        self._leave_checked_at = self.clock()
        try:
            with sweep_lock(self.sweep.graders / "leave.lock", timeout=self.settings.lock_timeout_s):
                serving = [b for b in self.sweep.serving_graders() if b.holder != self.holder]
                if not serving or self.pool.alive() < 2:
                    return False
                self._state = "exited"
                self._note = f"idle for {self.settings.scale_idle_s:g} s; {len(serving)} other grader(s) serve"
                self._beat()
                return True
        except Timeout as e:
            self._held(e)
            return False
