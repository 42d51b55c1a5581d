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
    ALONE_FIXTURES,
    APART_FILES,
    CPU_HEAVY,
    PHASES,
    REPO,
    SLURM_FILES,
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
    s, g = Item("test_s", "slurm"), Item("test_g", file="test_slurm_nodes.py")  # phase 2's Slurm lane
    h = Item("test_h", fixtures=("hello_model",))  # fast, but takes a session fixture of the local lane
    w, x = Item("test_w", file="test_user_world.py"), Item("test_x", "slurm", "slow", file="test_hostile_agent.py")
    everything = [a, b, c, f, s, g, h, w, x]
    kept = {phase: phase_of(phase, list(everything))[0] for phase in PHASES}
    assert kept == {
        "sidebyside": [a, c],
        "fast": [f],
        "slurm": [s, g],
        "local": [b, h],
        "apart": [w, x],
    }
    assert sorted(map(id, sum(kept.values(), []))) == sorted(map(id, everything))  # each in one run
    assert phase_of("slurm", list(everything))[1] == [a, b, c, f, h, w, x]
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


def test_phase_1_hands_out_the_longest_groups_first_and_the_local_lane_runs_the_busy_demo_last():
    a1, a2 = Item("test_1", "sidebyside", file="test_a.py"), Item("test_2", "sidebyside", file="test_a.py")
    world = Item("test_w", "sidebyside", "slow", file="test_b.py")
    demo = Item("test_d", "sidebyside", "slow", file="test_demo.py")
    users = Item("test_u", "sidebyside", "slow", file="test_cluster_user.py")
    fast = Item("test_f", file="test_a.py")
    levels = Item("test_l", "sidebyside", "slow", file="test_offline_levels.py")
    order = [levels, demo, users, a1, world, a2]  # the CPU-heavy group first; the rest keep their order
    assert phase_of("sidebyside", [a1, world, levels, demo, fast, a2, users])[0] == order
    assert phase_of("fast", [a1, fast, a2])[0] == [fast]
    # phase 2's local lane: the tests on the demo under busy loops last, the others in their order
    d1, d2 = Item("test_d1", "slow", fixtures=("demo_sweep",)), Item("test_d2", fixtures=("demo_sweep",))
    s1, s2 = Item("test_s1", "slow"), Item("test_s2", "slow", file="test_b.py")
    assert phase_of("local", [d1, s1, d2, s2])[0] == [s1, s2, d1, d2]


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
        assert file not in SLURM_FILES | APART_FILES, f"{file}::{node.name} must not run beside others"
        assert not {a.arg for a in node.args.args} & ALONE_FIXTURES, f"{file}::{node.name} takes {ALONE_FIXTURES}"
        assert "busy_loops" not in ast.unparse(node), f"{file}::{node.name} loads the machine: it must run alone"


@pytest.fixture
def fake_pytest(tmp_path):
    """A stand-in for `python -m pytest` that logs its arguments and exits with the code given for the run
    (--phase=NAME) it was given, 3 for a run without --phase."""
    script = tmp_path / "pytest"
    script.write_text(
        '#!/bin/sh\necho "$*" >> "$LOG"\n'
        'for a in "$@"; do case "$a" in --phase=*) eval "exit \\$RC_${a#--phase=}";; esac; done\nexit 3\n'
    )
    script.chmod(0o755)

    def run(*args: str, workers: str | None = None, **rcs: int) -> tuple[int, list[str]]:
        """The exit code and the runs (a phase's two runs start together: sorted), each phase's code from
        `rcs` (sidebyside=, fast=, slurm=, local=, apart=; 0 where not given)."""
        log = tmp_path / "log"
        log.unlink(missing_ok=True)
        env = {**os.environ, "A2RL_PYTEST": str(script), "LOG": str(log)}
        env.update({f"RC_{phase}": str(rcs.get(phase, 0)) for phase in PHASES})
        env.pop("A2RL_TEST_WORKERS", None)
        if workers is not None:
            env["A2RL_TEST_WORKERS"] = workers
        proc = subprocess.run(["bash", str(REPO / "tools" / "test-phases.sh"), *args], env=env, capture_output=True)
        calls = log.read_text().splitlines()
        return proc.returncode, sorted(calls[:2]) + sorted(calls[2:4]) + calls[4:]

    return run


def test_the_phases_exit_codes_combine_and_nothing_collected_in_all_is_exit_5(fake_pytest):
    rc, calls = fake_pytest("-m", "slow", "tests/test_x.py")
    assert rc == 0
    assert calls == [
        "--phase=fast -m slow tests/test_x.py",
        "--phase=sidebyside -n 4 --dist loadscope -m slow tests/test_x.py",
        "--phase=local -m slow tests/test_x.py",
        "--phase=slurm -m slow tests/test_x.py",
        "--phase=apart -m slow tests/test_x.py",
    ]
    none = dict.fromkeys(PHASES, 5)
    assert fake_pytest(**none)[0] == 5
    for phase in PHASES:  # the selection in one run only; a failure in any run
        assert fake_pytest(**{**none, phase: 0})[0] == 0
        assert fake_pytest(**{phase: 1})[0] == 1 and fake_pytest(**{**none, phase: 4})[0] == 4
    # the first failing run's code, in the order above
    assert fake_pytest(sidebyside=2, fast=1)[0] == 2 and fake_pytest(fast=1, slurm=2)[0] == 1
    assert fake_pytest(local=2, slurm=1)[0] == 2 and fake_pytest(slurm=1, apart=2)[0] == 1
    fast, sidebyside = "--phase=fast -x", "--phase=sidebyside -n 4 --dist loadscope -x"
    assert fake_pytest("-x", sidebyside=1) == (1, [fast, sidebyside])  # -x: a failing phase ends the run
    assert fake_pytest("-x", fast=1) == (1, [fast, sidebyside])
    assert fake_pytest("-x", slurm=2) == (2, [fast, sidebyside, "--phase=local -x", "--phase=slurm -x"])
    assert fake_pytest("--maxfail=1", apart=1)[0] == 1 and len(fake_pytest("--maxfail=1", apart=1)[1]) == 5
    assert fake_pytest(workers="2")[1][1].startswith("--phase=sidebyside -n 2 ")
    assert fake_pytest("-k", "x", workers="0") == (3, ["-k x"])  # the fallback: one plain run


def test_every_test_that_loads_the_machine_is_slow_and_so_never_runs_with_the_fast_ones():
    """The fast tests run beside phase 1's workers: a test that starts busy loops must be slow (phase 2)."""
    for path in sorted((REPO / "tests").glob("test_*.py")):
        if path.name == "test_suite_phases.py":  # this file names them
            continue
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and "busy_loops" in ast.unparse(node):
                assert any("slow" in ast.unparse(d) for d in node.decorator_list), f"{path.name}::{node.name}"
