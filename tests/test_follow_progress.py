"""The follower as a log file shows it (stdout no terminal, as in a Slurm job's output): a progress block at every
change and at least every 30 s (configurable), with each running run's stage and step (the reference agent's
stage lines), turns (a CLI agent's transcript) and last submission, and what each grader is grading. Virtual
time: the follower's clock and sleep are the fake clock's."""

from __future__ import annotations

import json
import os
import socket

import pytest

from a2rl.records import now
from a2rl.scheduling import launcher as launcher_module
from a2rl.scheduling.launcher import PROGRESS_S, Launcher, terminal_line
from a2rl.scheduling.monitor import collect
from a2rl.scheduling.progress import Progress, pipeline_stage
from a2rl.store.queue import Lease
from a2rl.store.sweepdir import GraderBeat, RunStatus
from test_progress_usage import running_run_with_tokens
from test_tables import finish, sweep  # noqa: F401  (the fixture: a synthetic sweep, four runs not finished)

PIPELINE_RUN = "gsm8k__claude__gpt-x__tiny-llama__sft-only__s2"  # its log gets the reference agent's lines
CLI_RUN = "humaneval__claude__gpt-x__tiny-llama__sft-only__s0"  # its log gets a claude transcript


def start(sweep, run_id):  # noqa: F811
    """The run's job says it is running (no job id: the scheduler is not asked, the fresh heartbeat decides)."""
    RunStatus(run_id=run_id, state="running", host=socket.gethostname(), heartbeat_at=now(), executor="local").dump(
        sweep.run_dir(run_id) / "status.json"
    )


def append(sweep, run_id, text):  # noqa: F811
    with open(sweep.run_dir(run_id) / "agent.log", "a") as f:
        f.write(text)


def claude_turn(text: str, tool: str) -> str:
    content = [{"type": "text", "text": text}, {"type": "tool_use", "name": tool, "input": {"command": "ls"}}]
    return json.dumps({"type": "assistant", "message": {"content": content}}) + "\n"


def two_running(sweep, monkeypatch) -> str:  # noqa: F811
    """PIPELINE_RUN and CLI_RUN running, a grader holding a lease on CLI_RUN's first submission (its id)."""
    monkeypatch.setattr(launcher_module, "replace_dead_grader", lambda *a: None)  # no real grader job here
    monkeypatch.setattr("sys.stdout.isatty", lambda: False)
    running_run_with_tokens(sweep)  # PIPELINE_RUN's two scored submissions
    for run_id in (PIPELINE_RUN, CLI_RUN):
        start(sweep, run_id)
    sid = f"{CLI_RUN}.0001"
    (sweep.queue.pending / f"{sid}.json").write_text("{}")
    (sweep.queue.seq / CLI_RUN).write_text("1")  # its first submission, being graded
    Lease(submission_id=sid, holder="g1", claimed_at=now(), expires_at=now() + 3600, attempt=1).dump(
        sweep.queue.leases / f"{sid}.json"
    )
    GraderBeat(holder="g1", host="h", pid=1, started_at=now(), heartbeat_at=now(), graded=3, state="grading").dump(
        sweep.graders / "grader-g1.json"
    )
    return sid


def follow(sweep, fake_clock, capsys, ticks, **kw) -> dict[int, list[str]]:  # noqa: F811
    """Follow with virtual time, `ticks[t]` acting at second t of it: the progress block printed at each second
    (where one was)."""
    t0, printed = fake_clock.now, {}

    def sleep(s: float) -> None:
        printed[round(fake_clock.now - t0)] = capsys.readouterr().out
        fake_clock.sleep(s)
        if (act := ticks.pop(round(fake_clock.now - t0), None)) is not None:
            act()

    Launcher(sweep, "local").follow(poll_s=2.0, sleep=sleep, clock=fake_clock, **kw)
    return {t: block(out) for t, out in printed.items() if out}


def test_a_log_file_gets_progress_at_every_change_and_every_30_s(sweep, monkeypatch, fake_clock, capsys):  # noqa: F811
    sid = two_running(sweep, monkeypatch)
    ticks = {
        4: lambda: append(sweep, PIPELINE_RUN, "[pipeline   3.0s] stage sft: 700 steps\n"),
        10: lambda: append(sweep, PIPELINE_RUN, "[pipeline   9.0s] sft step 70/700 loss 1.234\n"),
        12: lambda: append(sweep, CLI_RUN, claude_turn("Let me look.", "Bash")),
        100: lambda: end(sweep),
    }
    said = follow(sweep, fake_clock, capsys, ticks)
    assert PROGRESS_S == 30
    # at the start, at each change (4, 10, 12), then every 30 s of no change (42, 72), until the end (100)
    assert sorted(said) == [0, 4, 10, 12, 42, 72], sorted(said)
    assert said[0][1:] == [
        f"  {PIPELINE_RUN}: submission 2: 12.00",
        f"  {CLI_RUN}: 1 submission being graded",
        f"  grader g1: grading {sid}",
    ]
    assert said[0][0].startswith("[0m00s] 8/12 done · 2 running · ")
    assert said[4][1] == f"  {PIPELINE_RUN}: sft started · submission 2: 12.00"
    assert said[10][1] == f"  {PIPELINE_RUN}: sft step 70/700 · submission 2: 12.00"
    assert said[12][2] == f"  {CLI_RUN}: 2 turns · 1 submission being graded"
    assert said[42][0].startswith("[0m42s] ") and said[42][1:] == said[72][1:] == said[12][1:]


def test_the_interval_is_configurable(sweep, monkeypatch, fake_clock, capsys):  # noqa: F811
    two_running(sweep, monkeypatch)
    said = follow(sweep, fake_clock, capsys, {20: lambda: end(sweep)}, progress_s=5)
    assert sorted(said) == [0, 6, 12, 18]  # nothing changed: a block every 5 s (at the next 2-s poll)


def block(out: str) -> list[str]:
    """The progress block the follower printed last in `out` (after any ERROR line): its line and the rest."""
    lines = out.splitlines()
    return lines[max(i for i, line in enumerate(lines) if " done · " in line) :]


def end(sweep):  # noqa: F811
    """Every run finished, and the grader done with the submission it held (a follower waits while a live grader
    still holds work: tests/test_fs_faults.py)."""
    for entry in (*sweep.queue.pending.glob("*.json"), *sweep.queue.leases.glob("*.json")):
        entry.unlink()
    for seed in (0, 1, 2):
        finish(sweep, "humaneval", "sft-only", seed, [])
    finish(sweep, "gsm8k", "sft-only", 2, [(10, None, 12.0)])


@pytest.mark.parametrize(
    "log, expected",
    [
        ("", None),
        ("[a2rl 10:00:00] agent started\n", None),
        ("[pipeline   1.0s] stage sft: 700 steps\n", "sft started"),
        ("[pipeline   1.0s] stage sft: 700 steps\n[pipeline   5.0s] sft step 140/700 loss 0.5\n", "sft step 140/700"),
        (
            "[pipeline  99.0s] sft step 700/700 loss 0.1\n[pipeline 100.0s] stage grpo skipped: no judge\n",
            "grpo skipped",
        ),
        ("[pipeline 200.0s] stage grpo: 60 s of the 90 s budget left\n", "grpo started"),
        ("[pipeline 300.0s] grpo step 40/40 reward 0.9\n[pipeline 301.0s] done\n", "done"),
    ],
)
def test_the_reference_agents_stage_and_step_from_its_log(log, expected):
    assert pipeline_stage(log) == expected


def test_a_terminal_gets_one_line_with_each_running_run_cut_at_its_width(sweep, monkeypatch):  # noqa: F811
    two_running(sweep, monkeypatch)
    st = collect(sweep)
    monkeypatch.setattr("shutil.get_terminal_size", lambda *a: os.terminal_size((200, 24)))
    full = "[0m00s] 8/12 done · claude/s2: submission 2: 12.00 · claude/s0: 1 submission being graded"
    assert terminal_line("[0m00s] 8/12 done", Progress(sweep), st) == full
    monkeypatch.setattr("shutil.get_terminal_size", lambda *a: os.terminal_size((40, 24)))
    assert terminal_line("[0m00s] 8/12 done", Progress(sweep), st) == full[:39]
