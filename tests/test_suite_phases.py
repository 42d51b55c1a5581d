"""The suite's two phases (tools/test-phases.sh, run by tools/test.sh): the tests marked `sidebyside` in parallel
pytest-xdist workers and beside them the fast tests one at a time, then the others one at a time. Which run a test
is in (conftest's phase_of, --phase), how the runs' exit codes combine, and that no test that must run alone is
marked to run beside others or runs with the fast ones."""

from __future__ import annotations

import ast
import os
import subprocess
from types import SimpleNamespace

import pytest

from conftest import (
    ALONE_FILES,
    ALONE_FIXTURES,
    CPU_HEAVY,
    REPO,
    phase_group,
    pytest_collection_modifyitems,
    pytest_xdist_make_scheduler,
)


class Item:
    def __init__(self, name: str, *marks: str, file: str = "test_x.py", fixtures: tuple[str, ...] = ()):
        self.marks = set(marks)
        self.path = REPO / "tests" / file
        self.nodeid = f"tests/{file}::{name}"
        self.fixturenames = ["request", *fixtures]

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
    a, b, c = Item("test_a", "sidebyside"), Item("test_b", "slow"), Item("test_c", "sidebyside", "slow")
    f = Item("test_f")  # fast: beside phase 1's workers
    # fast but on Slurm, in a must-run-alone file, or taking a must-run-alone fixture: phase 2
    s, g, h = Item("test_s", "slurm"), Item("test_g", file="test_slurm_nodes.py"), Item("test_h", fixtures=("qos20",))
    everything = [a, b, c, f, s, g, h]
    assert phase_of("sidebyside", list(everything)) == ([a, c], [b, f, s, g, h])
    assert phase_of("fast", list(everything)) == ([f], [a, b, c, s, g, h])
    assert phase_of("alone", list(everything)) == ([b, s, g, h], [a, c, f])
    assert phase_of("all", list(everything)) == (everything, [])


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
    assert phase_group("tests/test_cluster_user.py::test_x") == "cpu"  # beside the real CLIs' budgets it broke them


def test_phase_1_hands_out_the_longest_groups_first_and_keeps_each_files_order():
    a1, a2 = Item("test_1", "sidebyside", file="test_a.py"), Item("test_2", "sidebyside", file="test_a.py")
    world = Item("test_w", "sidebyside", "slow", file="test_b.py")
    demo = Item("test_d", "sidebyside", "slow", file="test_demo.py")
    users = Item("test_u", "sidebyside", "slow", file="test_cluster_user.py")
    fast = Item("test_f", file="test_a.py")
    levels = Item("test_l", "sidebyside", "slow", file="test_offline_levels.py")
    order = [levels, demo, users, a1, world, a2]  # the CPU-heavy group first; the rest keep their order
    assert phase_of("sidebyside", [a1, world, levels, demo, fast, a2, users])[0] == order
    assert phase_of("fast", [a1, fast, a2])[0] == [fast]


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
    """A stand-in for `python -m pytest` that logs its arguments and exits with RC_SIDEBYSIDE, RC_FAST, RC_ALONE or
    RC_ALL by the run it was given."""
    script = tmp_path / "pytest"
    script.write_text(
        '#!/bin/sh\necho "$*" >> "$LOG"\n'
        'case "$*" in *--phase=sidebyside*) exit "$RC_SIDEBYSIDE";; *--phase=fast*) exit "$RC_FAST";;\n'
        '*--phase=alone*) exit "$RC_ALONE";; esac\nexit "$RC_ALL"\n'
    )
    script.chmod(0o755)

    def run(
        rc_sidebyside: int, rc_alone: int, *args: str, rc_fast: int = 0, workers: str | None = None
    ) -> tuple[int, list[str]]:
        log = tmp_path / "log"
        log.unlink(missing_ok=True)
        env = {**os.environ, "A2RL_PYTEST": str(script), "LOG": str(log), "RC_ALL": "3"}
        env.update(RC_SIDEBYSIDE=str(rc_sidebyside), RC_FAST=str(rc_fast), RC_ALONE=str(rc_alone))
        env.pop("A2RL_TEST_WORKERS", None)
        if workers is not None:
            env["A2RL_TEST_WORKERS"] = workers
        proc = subprocess.run(["bash", str(REPO / "tools" / "test-phases.sh"), *args], env=env, capture_output=True)
        calls = log.read_text().splitlines()
        return proc.returncode, sorted(calls[:2]) + calls[2:]  # phase 1's two runs start together

    return run


def test_the_phases_exit_codes_combine_and_nothing_collected_in_all_is_exit_5(fake_pytest):
    rc, calls = fake_pytest(0, 0, "-m", "slow", "tests/test_x.py")
    assert rc == 0
    assert calls == [
        "--phase=fast -m slow tests/test_x.py",
        "--phase=sidebyside -n 4 --dist loadscope -m slow tests/test_x.py",
        "--phase=alone -m slow tests/test_x.py",
    ]
    assert fake_pytest(5, 0)[0] == 0 and fake_pytest(0, 5)[0] == 0  # the selection in some runs only
    assert fake_pytest(5, 5)[0] == 0 and fake_pytest(5, 5, rc_fast=5)[0] == 5
    assert fake_pytest(1, 0)[0] == 1 and fake_pytest(0, 1)[0] == 1 and fake_pytest(5, 1)[0] == 1
    assert fake_pytest(0, 0, rc_fast=1)[0] == 1 and fake_pytest(5, 5, rc_fast=4)[0] == 4
    assert fake_pytest(2, 1)[0] == 2 and fake_pytest(0, 2, rc_fast=1)[0] == 1  # the first failing run's code
    assert fake_pytest(2, 0, rc_fast=1)[0] == 2
    fast, sidebyside = "--phase=fast -x", "--phase=sidebyside -n 4 --dist loadscope -x"
    assert fake_pytest(1, 0, "-x") == (1, [fast, sidebyside])  # -x: no phase 2
    assert fake_pytest(0, 0, "-x", rc_fast=1) == (1, [fast, sidebyside])
    assert fake_pytest(0, 0, workers="2")[1][1].startswith("--phase=sidebyside -n 2 ")
    assert fake_pytest(0, 0, "-k", "x", workers="0") == (3, ["-k x"])  # the fallback: one plain run


def test_every_test_that_loads_the_machine_is_slow_and_so_never_runs_with_the_fast_ones():
    """The fast tests run beside phase 1's workers: a test that starts busy loops must be slow (phase 2)."""
    for path in sorted((REPO / "tests").glob("test_*.py")):
        if path.name == "test_suite_phases.py":  # this file names them
            continue
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and "busy_loops" in ast.unparse(node):
                assert any("slow" in ast.unparse(d) for d in node.decorator_list), f"{path.name}::{node.name}"
