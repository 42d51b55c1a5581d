"""The shared ReAct prompt: what a model with a short context is shown."""

from __future__ import annotations

import pytest

from a2rl.tasklib.envs import Episode, react_prompt


def test_a_prompt_that_does_not_fit_keeps_the_task_and_the_latest_turns():
    ep = Episode(["TASK: take coin", "room B", "room C", "room D"], ["go east", "go north", "go west"])
    full = react_prompt("H", ep)
    assert full == (
        "H\n\nObservation: TASK: take coin\nAction: go east\nObservation: room B\nAction: go north\n"
        "Observation: room C\nAction: go west\nObservation: room D\nAction:"
    )
    short = react_prompt("H", ep, fits=lambda p: len(p) <= len(full) - 30)
    # the first observation states the task: the turns after it go first, oldest first
    assert short == (
        "H\n\nObservation: TASK: take coin\nAction: go east\nObservation: room C\nAction: go west\n"
        "Observation: room D\nAction:"
    )
    tiny = react_prompt("H", ep, fits=lambda p: len(p) <= 40)
    assert len(tiny) <= 40 and tiny.endswith("Observation: room D\nAction:")


def test_load_module_loads_each_path_under_a_shared_name(tmp_path):
    """One process may play several tasks' workspaces, each env.py under the default name."""
    from a2rl.tasklib.envs import load_module

    for task in ("a", "b", "a"):
        (tmp_path / task).mkdir(exist_ok=True)
        (tmp_path / task / "env.py").write_text(f"TASK = {task!r}\n")
        assert load_module(tmp_path / task / "env.py", "a2rl_test_shared_env").TASK == task


def test_load_module_fresh_runs_the_file_on_disk_and_a_failed_run_leaves_nothing(tmp_path):
    """Prepare scripts and evaluators load `fresh` (a long-lived grader runs the code on disk); a file that raises
    is not found half-run by the next load."""
    import sys

    from a2rl.tasklib.envs import load_module

    env = tmp_path / "env.py"
    env.write_text("V = 1\n")
    assert load_module(env, "a2rl_test_fresh_env").V == 1
    env.write_text("V = 22\n")  # another length: the bytecode cache trusts same size and mtime second
    assert load_module(env, "a2rl_test_fresh_env").V == 1  # cached per path
    assert load_module(env, "a2rl_test_fresh_env", fresh=True).V == 22
    env.write_text("V = 3\nraise RuntimeError('broken')\n")
    with pytest.raises(RuntimeError):
        load_module(env, "a2rl_test_fresh_env", fresh=True)
    assert "a2rl_test_fresh_env" not in sys.modules
    with pytest.raises(FileNotFoundError):
        load_module(tmp_path / "missing.py", "a2rl_test_missing_env")


def test_a_missing_evaluator_is_one_line(tmp_path):
    from a2rl.errors import SpecError
    from a2rl.spec.tasks import get_task
    from a2rl.tasklib.evaluator import load_evaluator

    task = get_task("arith")
    moved = type(task)(task.spec.model_copy(update={"evaluator": "gone.py"}), task.folder)
    with pytest.raises(SpecError, match="gone.py: no such task module"):
        load_evaluator(moved)
