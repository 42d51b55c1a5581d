"""The shared ReAct prompt: what a model with a short context is shown."""

from __future__ import annotations

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
