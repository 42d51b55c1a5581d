"""The follower and `a2rl status` show tokens and cost so far per run where the transcript gives them: a finished
run's totals, a running run's as recorded with its last submission. The follower's progress line totals them; it
prints a line per run as the run ends."""

from __future__ import annotations

from a2rl.scheduling.launcher import Launcher
from a2rl.scheduling.monitor import collect
from a2rl.store.ledger import LedgerEntry
from conftest import a2rl
from test_tables import finish, sweep  # noqa: F401  (the fixture: a synthetic sweep with known usage)


def running_run_with_tokens(sweep):  # noqa: F811
    run = next(r for r in sweep.runs() if (r.task, r.mode, r.seed) == ("gsm8k", "sft-only", 2))  # no result yet
    for seq, (tokens, cost) in enumerate([(300, 0.05), (777, 0.1)], 1):
        sweep.ledger.record(
            LedgerEntry(
                submission_id=f"{run.run_id}.{seq:04d}",
                run_id=run.run_id,
                seq=seq,
                submitted_at=1.0,
                claimed_at=1.0,
                graded_at=1.0,
                status="scored",
                score=12.0,
                model_path="m",
                task="gsm8k",
                protocol="paper",
                evaluator_version=1,
                grader="g",
                attempt=1,
                budget_used_s=5.0 * seq,
                tokens=tokens,
                cost_usd=cost,
            )
        )
    return run


def test_follower_line_totals_tokens_and_cost_of_runs_that_report_them(sweep):  # noqa: F811
    run = running_run_with_tokens(sweep)
    st = collect(sweep)
    assert st.usage[run.run_id] == (777, 0.1)
    assert st.usage["gsm8k__claude__gpt-x__tiny-llama__s0"] == (5000, 0.5)
    assert "gsm8k__claude__gpt-x__tiny-llama__sft-only__s0" not in st.usage  # its stack reported nothing
    assert st.line(0).endswith(" · tokens 205.8k, $2.10 (3 runs)")


def test_status_shows_tokens_and_cost_per_run(sweep):  # noqa: F811
    run = running_run_with_tokens(sweep)
    out = a2rl("status", str(sweep.root), check=True).stdout
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith(("gsm8k", "humaneval"))}
    assert "tokens" in out.splitlines()[0] and "cost $" in out.splitlines()[0]
    assert "200,000" in lines["gsm8k__claude__gpt-x__tiny-llama__s1"].split()
    assert "1.50" in lines["gsm8k__claude__gpt-x__tiny-llama__s1"].split()
    assert {"777", "0.10"} <= set(lines[run.run_id].split())


def test_the_follower_prints_each_run_as_it_ends_with_its_tokens_and_cost(sweep, capsys):  # noqa: F811
    """Runs that end while it follows get a line each (their transcript's totals where it gives them); runs that
    had ended before it started get none."""
    ticks = []

    def sleep(_s: float) -> None:  # the remaining runs end, one poll apart
        ticks.append(_s)
        if len(ticks) == 1:
            finish(sweep, "gsm8k", "sft-only", 2, [(10, 9000, 25.0), (20, 12_000, None)], usage=(10_000, 2_345, 0.25))
        elif len(ticks) == 2:
            for seed in (0, 1):
                finish(sweep, "humaneval", "sft-only", seed, [])
            finish(sweep, "humaneval", "sft-only", 2, [], status="failed")

    assert Launcher(sweep, "local").follow(poll_s=1.0, sleep=sleep) == 1  # failed runs: exit 1
    ended = [line for line in capsys.readouterr().out.splitlines() if line.startswith(("gsm8k", "humaneval"))]
    assert ended == [
        "gsm8k__claude__gpt-x__tiny-llama__sft-only__s2: ok · best 25.00 · base model 10.00 · 2 submissions (1 valid)"
        " · tokens 12.3k, $0.25",
        "humaneval__claude__gpt-x__tiny-llama__sft-only__s0: ok · best — · base model — · 0 submissions (0 valid)",
        "humaneval__claude__gpt-x__tiny-llama__sft-only__s1: ok · best — · base model — · 0 submissions (0 valid)",
        "humaneval__claude__gpt-x__tiny-llama__sft-only__s2: failed · best — · base model — · 0 submissions (0 valid)",
    ]
