"""A sweep with schema errors still gets its references checked: one launch reports every problem."""

from __future__ import annotations

import pytest

from conftest import a2rl, errors_of, write_sweep


def test_a_wrong_type_and_an_unknown_agent_are_reported_together(tmp_path):
    errors = errors_of(write_sweep(tmp_path, agents=["baseline", "claud"], seeds=["zero"]))
    assert len(errors) == 2, errors
    assert errors[0] == "seeds[0]: Input should be a valid integer (got 'zero')"
    assert errors[1].startswith("agents[1]: unknown agent 'claud' (did you mean 'claude'? known: ")


def test_every_kind_of_reference_is_checked_beside_schema_errors(tmp_path):
    errors = errors_of(
        write_sweep(
            tmp_path,
            tasks=["nope"],
            models=["builtin:huge"],
            modes=["fre"],
            cluster="nowhere",
            budget="soon",
            grader={"poll_s": "fast"},
            bogus=1,
        )
    )
    assert {e.split(":", 1)[0] for e in errors} == {
        "budget",
        "grader.poll_s",
        "bogus",
        "tasks[0]",
        "models[0].path",
        "modes[0]",
        "cluster",
    }, errors


@pytest.mark.parametrize(
    "fields, absent",
    [
        # a required field that breaks the schema is not also reported as an unknown reference
        ({"tasks": "echo"}, "tasks[0]: unknown task"),
        ({"agents": [{"name": "baseline", "args": "x"}]}, "agents[0]: unknown agent"),
        ({"models": [{"name": "bad name!", "path": "/nowhere"}]}, "models[0].path:"),
        # nor are references resolved against a search path that is itself invalid
        ({"task_paths": "tasks"}, "tasks[0]: unknown task"),
    ],
)
def test_references_of_an_invalid_field_are_not_checked(tmp_path, fields, absent):
    errors = errors_of(write_sweep(tmp_path, **fields))
    assert errors and not any(e.startswith(absent) for e in errors), errors


def test_a_duplicate_and_an_unknown_agent_are_reported_together(tmp_path):
    errors = errors_of(write_sweep(tmp_path, seeds=[1, 1], agents=["claud"]))
    assert any("duplicate entries [1]" in e for e in errors), errors
    assert any(e.startswith("agents[0]: unknown agent 'claud'") for e in errors), errors


def test_launch_prints_both_kinds(tmp_path):
    proc = a2rl("launch", str(write_sweep(tmp_path, agents=["claud"], budget="soon")), "--dry-run", timeout=300)
    assert proc.returncode != 0
    assert "budget: expected a positive number of seconds" in proc.stderr and "unknown agent 'claud'" in proc.stderr, (
        proc.stderr
    )
    assert "Traceback" not in proc.stderr


def test_a_vllm_grader_or_driver_without_its_interpreter_is_named(tmp_path, monkeypatch):
    """backend vllm runs in the vLLM environment ($A2RL_VLLM_PYTHON, else .venv-vllm) unless `python` says."""
    from a2rl.spec.sweep import grader_python, load_sweep

    missing = tmp_path / "none" / "python"
    monkeypatch.setenv("A2RL_VLLM_PYTHON", str(missing))
    path = write_sweep(
        tmp_path, grader={"backend": "vllm"}, local_drivers={"big": {"model": "builtin:tiny-llama", "backend": "vllm"}}
    )
    errors = errors_of(path)
    assert (
        f"grader.python: no interpreter at {missing} (build the vLLM environment with tools/setup-vllm-env.sh, "
        f"or set grader.python / $A2RL_VLLM_PYTHON)" in errors
    )
    assert (
        f"local_drivers.big.python: no interpreter at {missing} (build the vLLM environment with "
        f"tools/setup-vllm-env.sh, or set python / $A2RL_VLLM_PYTHON)" in errors
    )
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.touch()
    spec = load_sweep(
        write_sweep(
            tmp_path,
            grader={"backend": "vllm", "python": "venv/bin/python"},
            local_drivers={"big": {"model": "builtin:tiny-llama", "python": str(python)}},
        )
    )
    assert grader_python(spec) == python  # relative to the sweep file
    assert grader_python(load_sweep(write_sweep(tmp_path))) is None  # transformers: the launcher's own
