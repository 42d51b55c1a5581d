"""The transcript parsers on the real CLIs' output (tests/fixtures/transcripts: claude, codex, gemini and opencode
run against tests/scripted_server.py, stdout as printed), and the failure reasons of a CLI that crashed, hung or
printed a transcript no parser reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from a2rl.recording.transcripts import cli_failure, parse_usage

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "transcripts"
REAL = {  # parser: (fixture, calls, input tokens (cached included), cached, output, cost: the CLI's own)
    "claude": ("claude-2.1.197.jsonl", 1, 33690, 40, 80, 0.102162),
    "codex": ("codex-0.169.0.jsonl", 1, 27279, 40, 80, None),
    "gemini": ("gemini-0.61.0.json", 1, 24361, 40, 80, None),
    "opencode": ("opencode-1.18.33.jsonl", 4, 10738, 40, 80, 0.027955),
}
RUN_LINES = "[a2rl 10:00:00] attempt 1 on node: claude -p ...\n"


@pytest.mark.parametrize("parser", sorted(REAL))
def test_real_transcripts_parse(parser):
    name, calls, inp, cached, out, cost = REAL[parser]
    text = RUN_LINES + (FIXTURES / name).read_text() + "[a2rl 10:01:00] workspace archived\n"
    u = parse_usage(parser, text)
    assert (u.parser, u.calls, u.input_tokens, u.cached_input_tokens, u.output_tokens, u.cost_usd) == (
        parser,
        calls,
        inp,
        cached,
        out,
        cost,
    )
    assert cli_failure(parser, parser, text, u, status="ok", exit_code=0) is None


def test_a_crashed_cli_is_named_with_its_exit_code_and_last_line():
    text = RUN_LINES + "Error: something broke\n"
    u = parse_usage("claude", text)
    assert (
        cli_failure("claude", "claude", text, u, status="ok", exit_code=3)
        == "the agent CLI `claude` exited with code 3 (its last output line: Error: something broke)"
    )


def test_a_cli_that_printed_nothing_before_its_budget_ended():
    assert (
        cli_failure("codex", "codex", RUN_LINES, parse_usage("codex", RUN_LINES), status="timeout", exit_code=None)
        == "the agent CLI `codex` printed nothing before it was stopped"
    )


@pytest.mark.parametrize("parser", sorted(REAL))
def test_an_unparseable_transcript_is_a_failure_reason(parser):
    # the real output cut before its totals (a claude result line, a codex turn.completed ...), or plain text
    lines = (FIXTURES / REAL[parser][0]).read_text().splitlines()
    for text in ("\n".join(lines[:1]) + "\n", "this is not JSON\n{broken\n"):
        if parser == "gemini":  # one JSON document: its first line alone is no document
            text = lines[0] + "\n" + text
        u = parse_usage(parser, RUN_LINES + text)
        reason = cli_failure(parser, "cli", RUN_LINES + text, u, status="ok", exit_code=0)
        assert u.calls == 0 and reason is not None
        assert reason.startswith(f"the agent CLI `cli` printed no transcript record the `{parser}` parser reads (")
        assert reason.endswith("its tokens and cost are unknown")


def test_stacks_without_a_transcript_have_no_cli_failure():
    assert cli_failure("none", "python", "", None, status="ok", exit_code=1) is None
