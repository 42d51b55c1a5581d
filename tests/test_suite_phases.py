"""The suite's two phases (tools/test-phases.sh, run by tools/test.sh): the tests marked `sidebyside` in parallel
pytest-xdist workers, then the others one at a time. Which side a test is on (conftest's --phase), how the two
exit codes combine, and that no test that must run alone is marked to run beside others."""

from __future__ import annotations

import ast
import os
import subprocess
from types import SimpleNamespace

import pytest

from conftest import CPU_HEAVY, REPO, phase_group, pytest_collection_modifyitems, pytest_xdist_make_scheduler

# Tests in these files must run alone: they stop Slurm daemons and nodes (test_slurm_nodes), add and delete a
# QOS and fill it (test_slurm_busy), fork-bomb, hog memory and fill /tmp (test_hostile_agent), or use the
# machine-wide /tmp/a2rl-scratch and a fixed user (test_user_world)
ALONE_FILES = {"test_slurm_nodes.py", "test_slurm_busy.py", "test_hostile_agent.py", "test_user_world.py"}
# fixtures a sidebyside test must not take: session fixtures too costly to build again in each worker (the demo
# under two busy loops, the trained HELLO model) and the QOS the busy tests fill
ALONE_FIXTURES = {"demo_sweep", "hello_model", "qos20"}


class Item:
    def __init__(self, name: str, *marks: str):
        self.marks = set(marks)

    def get_closest_marker(self, name):
        return name if name in self.marks else None


def phase_of(phase: str, items: list[Item]) -> tuple[list[Item], list[Item]]:
    deselected: list[Item] = []
    config = SimpleNamespace(
        getoption=lambda _: phase, hook=SimpleNamespace(pytest_deselected=lambda items: deselected.extend(items))
    )
    pytest_collection_modifyitems(config, items)
    return items, deselected


def test_each_test_runs_in_exactly_one_phase():
    a, b, c = Item("test_a", "sidebyside"), Item("test_b"), Item("test_c", "sidebyside", "slow")
    assert phase_of("sidebyside", [a, b, c]) == ([a, c], [b])
    assert phase_of("alone", [a, b, c]) == ([b], [a, c])
    assert phase_of("all", [a, b, c]) == ([a, b, c], [])


def test_phase_1_hands_out_a_files_tests_together_and_the_cpu_heavy_files_as_one_group():
    xdist = pytest.importorskip("xdist")  # the test extra has it (tools/test.sh)
    config = SimpleNamespace(getvalue=lambda name: ["2*popen"] if name == "tx" else None, option=SimpleNamespace())
    sched = pytest_xdist_make_scheduler(config, None)
    assert isinstance(sched, xdist.scheduler.LoadScopeScheduling)
    split = sched._split_scope
    assert split("tests/test_slurm.py::test_a") == split("tests/test_slurm.py::test_b[x]") == "tests/test_slurm.py"
    assert split("tests/test_real_clis.py::test_a[claude]") != split("tests/test_slurm.py::test_a")
    assert {split(f"{f}::test_x") for f in CPU_HEAVY} == {"cpu"} and len(CPU_HEAVY) == 3
    assert phase_group("tests/test_demo.py::test_demo_sweep_on_slurm") == "cpu"


def sidebyside_tests() -> list[tuple[str, ast.FunctionDef]]:
    found = []
    for path in sorted((REPO / "tests").glob("test_*.py")):
        tree = ast.parse(path.read_text())
        for node in tree.body:
            marked = isinstance(node, ast.FunctionDef) and any(
                "sidebyside" in ast.unparse(d) for d in node.decorator_list
            )  # a parameter's sidebyside mark (pytest.param(..., marks=...)) is in the decorator too
            if marked or (isinstance(node, ast.Assign) and "sidebyside" in ast.unparse(node)):
                found.append((path.name, node))
    return found


def test_no_test_that_must_run_alone_is_marked_sidebyside():
    found = sidebyside_tests()
    assert len(found) >= 10  # the scan sees the marks
    for file, node in found:
        assert isinstance(node, ast.FunctionDef), f"{file}: a module-wide sidebyside mark; mark each test"
        assert file not in ALONE_FILES, f"{file}::{node.name} must run alone"
        assert not {a.arg for a in node.args.args} & ALONE_FIXTURES, f"{file}::{node.name} takes {ALONE_FIXTURES}"
        assert "busy_loops" not in ast.unparse(node), f"{file}::{node.name} loads the machine: it must run alone"


@pytest.fixture
def fake_pytest(tmp_path):
    """A stand-in for `python -m pytest` that logs its arguments and exits with RC_SIDEBYSIDE, RC_ALONE or RC_ALL
    by the phase it was given."""
    script = tmp_path / "pytest"
    script.write_text(
        '#!/bin/sh\necho "$*" >> "$LOG"\n'
        'case "$*" in *--phase=sidebyside*) exit "$RC_SIDEBYSIDE";; *--phase=alone*) exit "$RC_ALONE";; esac\n'
        'exit "$RC_ALL"\n'
    )
    script.chmod(0o755)

    def run(rc_sidebyside: int, rc_alone: int, *args: str, workers: str | None = None) -> tuple[int, list[str]]:
        log = tmp_path / "log"
        log.unlink(missing_ok=True)
        env = {**os.environ, "A2RL_PYTEST": str(script), "LOG": str(log), "RC_ALL": "3"}
        env.update(RC_SIDEBYSIDE=str(rc_sidebyside), RC_ALONE=str(rc_alone))
        env.pop("A2RL_TEST_WORKERS", None)
        if workers is not None:
            env["A2RL_TEST_WORKERS"] = workers
        proc = subprocess.run(["bash", str(REPO / "tools" / "test-phases.sh"), *args], env=env, capture_output=True)
        return proc.returncode, log.read_text().splitlines()

    return run


def test_the_phases_exit_codes_combine_and_nothing_collected_in_both_is_exit_5(fake_pytest):
    rc, calls = fake_pytest(0, 0, "-m", "slow", "tests/test_x.py")
    assert rc == 0
    assert calls == [
        "--phase=sidebyside -n 4 --dist loadscope -m slow tests/test_x.py",
        "--phase=alone -m slow tests/test_x.py",
    ]
    assert fake_pytest(5, 0)[0] == 0 and fake_pytest(0, 5)[0] == 0  # the selection on one side only
    assert fake_pytest(5, 5)[0] == 5
    assert fake_pytest(1, 0)[0] == 1 and fake_pytest(0, 1)[0] == 1 and fake_pytest(5, 1)[0] == 1
    assert fake_pytest(2, 1)[0] == 2  # the first failing phase's code
    assert fake_pytest(1, 0, "-x") == (1, ["--phase=sidebyside -n 4 --dist loadscope -x"])  # -x: no phase 2
    assert fake_pytest(0, 0, workers="2")[1][0].startswith("--phase=sidebyside -n 2 ")
    assert fake_pytest(0, 0, "-k", "x", workers="0") == (3, ["-k x"])  # the fallback: one plain run
