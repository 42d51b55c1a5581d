"""A run's result, as its job writes it: the agent's status and exit code, what its transcript says it used
(tokens, cost), a CLI's failure read from its log, and the time set-up took per attempt."""

from __future__ import annotations

from a2rl.recording.transcripts import cli_failure, parse_usage, transcript_files
from a2rl.records import now, while_full
from a2rl.run.heartbeat import RunState
from a2rl.store.results import AgentUsage, RunResult, write_result


class Outcome(RunState):
    """AgentRun's (run/job.py) result."""

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
