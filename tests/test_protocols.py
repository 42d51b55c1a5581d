"""Evaluation protocols (`paper` | `a2rl`): a sweep runs both side by side; each run's protocol reaches its task's
evaluator and is part of its id, its baseline, its ledger entries, its result.json and its table row."""

from __future__ import annotations

import shutil
import sys

import pytest

from a2rl.grading.daemon import GradingDaemon
from a2rl.reporting.aggregate import HEADERS, rows
from a2rl.run.budget import Budget
from a2rl.run.submit import RunSubmitter
from a2rl.run.workspace import create_workspace
from a2rl.scheduling.launcher import open_sweep
from a2rl.spec.grid import expand
from a2rl.spec.sweep import SweepSpec
from a2rl.spec.tasks import get_task
from a2rl.store.baselines import load_baseline
from a2rl.store.results import write_result
from a2rl.tasklib.prepare import ensure_prepared
from conftest import FIXTURES, REPO, errors_of, write_sweep

sys.path.insert(0, str(FIXTURES / "agents"))
from variants import make_variant  # noqa: E402

# the echo task's scoring by protocol: paper scores s, a2rl s/2 (the base model: s = 10)
EVALUATOR = """
import json

def evaluate(generator, heldout_dir, options):
    generator.generate(["2+2="], max_new_tokens=1)
    score = float(getattr(generator.model.config, "a2rl_test_score", 10.0))
    return {"score": score if options["protocol"] == "paper" else score / 2, "seen": options["protocol"]}
"""


def test_protocols_are_a_grid_axis_with_stable_ids():
    spec = SweepSpec.model_validate(
        {
            "name": "p",
            "tasks": ["gsm8k"],
            "agents": ["claude"],
            "drivers": ["x"],
            "models": ["builtin:tiny-llama"],
            "protocols": ["paper", "a2rl"],
            "budget": 60,
            "executor": "local",
        }
    )
    ids = {r.protocol: r.run_id for r in expand(spec)}
    # the default protocol keeps the ids of sweeps from before protocols existed
    assert ids == {"paper": "gsm8k__claude__x__tiny-llama__s0", "a2rl": "gsm8k__claude__x__tiny-llama__a2rl__s0"}
    default = SweepSpec.model_validate(
        {
            **spec.model_dump(include={"name", "tasks", "drivers", "budget"}),
            "agents": ["claude"],
            "models": ["builtin:tiny-llama"],
        }
    )
    assert [r.protocol for r in expand(default)] == ["paper"]


@pytest.mark.parametrize(
    "protocols, expected",
    [
        (["paper", "exact"], "protocols[1]: Input should be 'paper' or 'a2rl' (got 'exact')"),
        (["a2rl", "a2rl"], "protocols: duplicate entries ['a2rl']"),
        ([], "protocols: List should have at least 1 item after validation, not 0"),
    ],
)
def test_a_bad_protocol_list_is_a_clear_error(tmp_path, protocols, expected):
    assert errors_of(write_sweep(tmp_path, protocols=protocols)) == [expected]


@pytest.fixture
def two_protocols(tmp_path, tiny_model):
    """The echo task with an evaluator that scores by protocol, in a sweep over both protocols."""
    tasks = tmp_path / "tasks"
    shutil.copytree(FIXTURES / "tasks" / "echo", tasks / "echo")
    (tasks / "echo" / "evaluator.py").write_text(EVALUATOR)
    sweep, runs = open_sweep(
        write_sweep(tmp_path, task_paths=[str(tasks)], protocols=["paper", "a2rl"]), tmp_path / "sd"
    )
    return sweep, {r.protocol: r for r in runs}


@pytest.mark.slow  # 3-9 s: kept out of the fast layer
def test_each_protocol_has_its_own_baseline_ledger_entries_result_and_row(two_protocols, tiny_model, tmp_path):
    sweep, runs = two_protocols
    grader = GradingDaemon(sweep)
    task = get_task("echo", [tmp_path / "tasks"])
    data = ensure_prepared(task, sweep.data_root())
    for run in runs.values():
        ws = create_workspace(
            sweep.workspace(run.run_id), task=task, data=data, model_dir=tiny_model, budget_s=60, source_tree=REPO
        )
        RunSubmitter(sweep, run, ws, Budget(60)).submit(
            str(make_variant(tiny_model, ws.output / "v", score=80, salt=3)), wait=False
        )
    while (claim := sweep.queue.claim(grader.holder, 60, sweep.ledger.has)) is not None:
        grader.grade(claim)
    expected = {"paper": (10.0, 80.0), "a2rl": (5.0, 40.0)}  # (baseline, submission)
    for protocol, run in runs.items():
        base = load_baseline(sweep, "echo", "tiny-llama", protocol)
        assert (base.protocol, base.score, base.details["seen"]) == (protocol, expected[protocol][0], protocol)
        (entry,) = sweep.ledger.entries(run.run_id)
        assert (entry.protocol, entry.score, entry.details["seen"]) == (protocol, expected[protocol][1], protocol)
        result = write_result(
            sweep,
            run.run_id,
            status="ok",
            failure_reason=None,
            agent_exit_code=0,
            agent_seconds=1.0,
            started_at=0.0,
            ended_at=1.0,
        )
        assert (result.protocol, result.baseline, result.best) == (protocol, *expected[protocol])
    problems: list[str] = []
    table = {row[HEADERS.index("protocol")]: dict(zip(HEADERS, row)) for row in rows(sweep, problems)}
    assert problems == []
    assert {p: (r["base model"], r["best (mean ± SEM)"]) for p, r in table.items()} == {
        "paper": ("10.00", "80.00 ± 0.00"),
        "a2rl": ("5.00", "40.00 ± 0.00"),
    }
