"""`a2rl status`'s grader engine line in words a user can read: which engine, how often it started afresh and how
often it swapped a submission's weights in place."""

from __future__ import annotations

import pytest

from a2rl.cli.status import engine_line
from a2rl.store.sweepdir import GraderBeat


def beat(starts: int, reloads: int, failures: int = 0) -> GraderBeat:
    return GraderBeat(
        holder="g0",
        host="h",
        pid=1,
        started_at=0.0,
        heartbeat_at=0.0,
        graded=0,
        state="idle",
        starts=starts,
        reloads=reloads,
        reload_failures=failures,
    )


@pytest.mark.parametrize(
    "backend, counts, expected",
    [
        ("vllm", (2, 3), "vLLM engine: started twice, reloaded weights 3 times"),
        ("vllm", (1, 2), "vLLM engine: started once, reloaded weights twice"),
        ("transformers", (1, 0), "transformers engine: started once"),
        ("auto", (0, 0), "grading engine: not started yet"),
        (
            "vllm",
            (3, 4, 2),
            "vLLM engine: started 3 times, reloaded weights 4 times, 2 failed reloads (each a fresh start)",
        ),
    ],
)
def test_engine_line_in_words(backend, counts, expected):
    assert engine_line(beat(*counts), backend) == expected
