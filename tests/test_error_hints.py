"""Errors that point at the fix, each one line as the user reads it: the closest known name for a mistyped key,
task, agent, model, protocol or kind; YAML errors at the file's line and column; one wording per kind of bad value;
a missing path said to be missing; `a2rl ls` alone lists everything."""

from __future__ import annotations

import pytest

from a2rl.cli.main import main
from a2rl.errors import SpecError
from a2rl.scheduling.readiness import model_problems
from a2rl.spec.sweep import load_sweep
from conftest import write_sweep

DURATION = "expected a positive number of seconds or a duration like '30m', '2h'"


def problems(path) -> list[str]:
    with pytest.raises(SpecError) as e:
        load_sweep(path)
    return [line.removeprefix(f"{path}: ") for line in e.value.lines]


@pytest.mark.parametrize(
    "fields, expected",
    [
        ({"sedes": [0]}, "sedes: unknown key (did you mean 'seeds'?)"),
        ({"grader": {"leas_s": 3}}, "grader.leas_s: unknown key (did you mean 'lease_s'?)"),
        ({"local_drivers": {"d": {"modle": "x"}}}, "local_drivers.d.modle: unknown key (did you mean 'model'?)"),
        (
            {"resources": {"zzz": 1}},
            "resources.zzz: unknown key (known: cpus, gpus, mem_gb, gpu_mem_gb, partition, "
            "account, qos, constraint, setup_margin_s, time_limit, array_parallelism, sbatch)",
        ),
        ({"tasks": ["ech"]}, "tasks[0]: unknown task 'ech' (did you mean 'echo'? known: "),
        ({"agents": ["baselin"]}, "agents[0]: unknown agent 'baselin' (did you mean 'baseline'? known: "),
        (
            {"models": ["builtin:tiny-lama"]},
            "models[0].path: unknown built-in model 'tiny-lama' (did you mean 'tiny-llama'? known: tiny-llama)",
        ),
        (
            {"protocols": ["papr"]},
            "protocols[0]: Input should be 'paper' or 'a2rl' (got 'papr'; did you mean 'paper'?)",
        ),
        (
            {"executor": "slrum"},
            "executor: Input should be 'local', 'slurm' or 'auto' (got 'slrum'; did you mean 'slurm'?)",
        ),
        ({"budget": "-5m"}, f"budget: {DURATION} (got '-5m')"),
        ({"budget": -300}, f"budget: {DURATION} (got -300)"),
        ({"budget": 0}, f"budget: {DURATION} (got 0)"),
        ({"budget": "soon"}, f"budget: {DURATION} (got 'soon')"),
        ({"resources": {"time_limit": "-2h"}}, f"resources.time_limit: {DURATION} (got '-2h')"),
    ],
)
def test_each_mistake_names_its_fix(tmp_path, fields, expected):
    found = problems(write_sweep(tmp_path, **fields))
    assert any(f.startswith(expected) if expected.endswith("known: ") else f == expected for f in found), found


def test_a_mistyped_key_of_an_agent_entry_is_named_once(tmp_path):
    assert problems(write_sweep(tmp_path, agents=[{"nam": "baseline"}])) == [
        "agents[0].name: Field required",
        "agents[0].nam: unknown key (did you mean 'name'?)",
    ]


def test_a_model_directory_named_like_a_builtin_points_at_the_builtin(tmp_path):
    # a directory's existence is the launching machine's check (scheduling/readiness.py), which launch refuses
    (found,) = model_problems(load_sweep(write_sweep(tmp_path, models=["tiny-llama"])))
    assert found == f"models[0].path: model directory '{tmp_path / 'tiny-llama'}' does not exist " + (
        "(did you mean 'builtin:tiny-llama'?)"
    )


def test_yaml_errors_name_the_file_line_and_column(tmp_path):
    bad = tmp_path / "sweep.yaml"
    bad.write_text("name: x\nbudget: 3m\n  seeds: [1]\n")
    with pytest.raises(SpecError) as e:
        load_sweep(bad)
    assert e.value.lines == [f"{bad}, line 3, column 8: YAML syntax error: mapping values are not allowed here"]
    assert "<unicode string>" not in str(e.value)


def test_missing_paths_are_said_not_to_exist(tmp_path, capsys):
    assert main(["validate", str(tmp_path / "absent.yaml")]) == 2
    assert capsys.readouterr().err.splitlines() == [f"error: {tmp_path / 'absent.yaml'} does not exist"]
    assert main(["status", str(tmp_path / "gone")]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: {tmp_path / 'gone'} does not exist (a launch writes a2rl-sweeps/<sweep name> unless given --sweep-dir)"
    ]
    assert main(["aggregate", str(tmp_path / "gone")]) == 2
    assert capsys.readouterr().err.splitlines()[-1].startswith(f"error: {tmp_path / 'gone'} does not exist (")


def test_ls_alone_lists_every_registry_and_a_mistyped_kind_gets_a_hint(capsys):
    assert main(["ls"]) == 0
    out = capsys.readouterr().out
    headers = [line.split()[0] for line in out.splitlines() if line.endswith("file") and "about" in line]
    assert headers == ["task", "agent", "cluster", "preset"], out
    assert "arith" in out and "pipeline" in out and "greedy" in out
    with pytest.raises(SystemExit):
        main(["ls", "taks"])
    assert capsys.readouterr().err.splitlines()[-1] == (
        "a2rl ls: error: argument KIND: unknown kind 'taks' (did you mean 'tasks'? known: tasks, agents, clusters, "
        "presets)"
    )
