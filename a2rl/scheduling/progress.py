"""What each running run and each grader is doing, for the follower's progress lines (read only, from the sweep
directory, so it works wherever the follower runs): the reference agent's stage and step as it logs them
(`[pipeline 12.0s] sft step 140/700 ...`, the lines its stage records are made of), a CLI agent's turns so far
(its transcript in agent.log, read by its stack's parser) and every run's last submission (the ledger), and the
submission each grader holds a lease on."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from a2rl.recording.turns import transcript_turns
from a2rl.records import now
from a2rl.scheduling.monitor import SweepState
from a2rl.spec.agents import agent_registry
from a2rl.store.queue import Lease
from a2rl.store.sweepdir import STALE_S, SweepDir
from a2rl.units import MIB

TAIL_BYTES = 256 * 1024  # the reference agent's last stage line is near the end of its log
TURNS_MAX_BYTES = 32 * MIB  # a transcript past this is not parsed at every change (its size is shown instead)
PIPELINE = re.compile(
    r"^\[pipeline\s+[\d.]+s\] (?:(?P<stage>\w+) step (?P<step>\d+)/(?P<of>\d+)|stage (?P<start>\w+)(?P<skip> skipped)?:"
    r"|(?P<done>done)$)",
    re.M,
)


def pipeline_stage(text: str) -> str | None:
    """The reference agent's stage and step from its log's last stage line: 'sft step 140/700', 'grpo started',
    'grpo skipped', 'done'; None when it logged none (another agent, or before its first stage)."""
    lines = list(PIPELINE.finditer(text))
    if not lines:
        return None
    m = lines[-1]  # the last stage line
    if m["stage"]:
        return f"{m['stage']} step {m['step']}/{m['of']}"
    if m["start"]:
        return f"{m['start']} {'skipped' if m['skip'] else 'started'}"
    return "done"


@dataclass
class Progress:
    """Per-run and per-grader progress, re-reading a run's log only when it grew."""

    sweep: SweepDir
    _logs: dict[str, tuple[int, str | None]] = field(default_factory=dict)  # run_id → (log size, what it said)
    _parsers: dict[str, str] = field(default_factory=dict)  # agent → its stack's transcript parser

    def _parser(self, agent: str) -> str:
        if agent not in self._parsers:
            try:
                paths = [Path(p) for p in self.sweep.spec.agent_paths]
                self._parsers[agent] = agent_registry(paths).get(agent).transcript
            except Exception:  # a stack no longer found: no turns to count
                self._parsers[agent] = "none"
        return self._parsers[agent]

    def _from_log(self, run_id: str, agent: str) -> str | None:
        path = self.sweep.run_dir(run_id) / "agent.log"
        try:
            size = path.stat().st_size
        except OSError:
            return None
        if self._logs.get(run_id, (-1, None))[0] == size:
            return self._logs[run_id][1]
        with open(path, "rb") as f:
            f.seek(max(0, size - TAIL_BYTES))
            said = pipeline_stage(f.read().decode(errors="replace"))
        if said is None and size > TURNS_MAX_BYTES:
            said = f"agent.log {size / MIB:.0f} MiB"
        elif said is None and (parser := self._parser(agent)) != "none":
            text = path.read_text(errors="replace")
            turns = sum(t.kind != "log" for t in transcript_turns(parser, text))
            said = f"{turns} turn{'s' if turns != 1 else ''}"
        self._logs[run_id] = (size, said)
        return said

    def run_line(self, run_id: str) -> str:
        """'sft step 140/700 · no submission yet', '12 turns · submission 2: 40.00'."""
        run = self.sweep.run(run_id)
        entries = self.sweep.ledger.entries(run_id)
        parts = [said] if (said := self._from_log(run_id, run.agent.name)) else []
        pending = self.sweep.queue.count(run_id) - len(entries)
        if entries:
            last = entries[-1]
            parts.append(f"submission {last.seq}: " + (f"{last.score:.2f}" if last.score is not None else last.status))
        if pending > 0:
            parts.append(
                f"{pending} more being graded" if entries else f"{pending} submission{'s' * (pending > 1)} being graded"
            )
        elif not entries:
            parts.append("no submission yet")
        return " · ".join(parts)

    def grader_lines(self, st: SweepState) -> list[str]:
        """What each live grader is doing: the submission it holds a lease on, a base model's score, or idle."""
        t = now()
        leased: dict[str, list[str]] = {}
        for path in sorted(self.sweep.queue.leases.glob("*.json")):
            lease = Lease.load_or_none(path)
            if lease is not None and lease.expires_at > t and (self.sweep.queue.pending / path.name).exists():
                leased.setdefault(lease.holder, []).append(lease.submission_id)
        out = []
        for beat in sorted(st.graders, key=lambda b: b.holder):
            if beat.state == "exited" or t - beat.heartbeat_at > STALE_S:
                continue
            doing = (
                f"grading {', '.join(leased[beat.holder])}"
                if beat.holder in leased
                else "scoring the base model"
                if beat.state == "baseline"
                else beat.state
            )
            out.append(f"grader {beat.holder}: {doing}")
        return out

    def lines(self, st: SweepState, running: list[str]) -> list[str]:
        return [f"  {run_id}: {self.run_line(run_id)}" for run_id in running] + [
            f"  {line}" for line in self.grader_lines(st)
        ]
