"""The follower's line and `a2rl status` show tokens and cost so far per run where the transcript gives them:
a finished run's totals, a running run's as recorded with its last submission."""

from __future__ import annotations

from a2rl.scheduling.monitor import collect
from a2rl.store.ledger import LedgerEntry
from conftest import a2rl
from test_tables import sweep  # noqa: F401  (the fixture: a synthetic sweep with known usage)


def running_run_with_tokens(sweep):  # noqa: F811
    run = next(r for r in sweep.runs() if (r.task, r.mode, r.seed) == ("gsm8k", "sft-only", 2))  # no result yet
    for seq, (tokens, cost) in enumerate([(300, 0.05), (777, 0.1)], 1):
        sweep.ledger.record(LedgerEntry(
            submission_id=f"{run.run_id}.{seq:04d}", run_id=run.run_id, seq=seq, submitted_at=1.0, claimed_at=1.0,
            graded_at=1.0, status="scored", score=12.0, model_path="m", task="gsm8k", protocol="paper", evaluator_version=1,
            grader="g", attempt=1, budget_used_s=5.0 * seq, tokens=tokens, cost_usd=cost))
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
