"""sweep.yaml validation: every mistake is reported with its field path, and nothing is submitted."""

from __future__ import annotations

import pytest

from a2rl.errors import SpecError
from a2rl.spec.grid import expand
from a2rl.spec.sweep import load_sweep, parse_duration
from conftest import a2rl, errors_of, write_sweep


def test_grid_is_the_cartesian_product_with_stable_ids(tmp_path):
    path = write_sweep(
        tmp_path, agents=["baseline", {"name": "baseline", "label": "b2"}], drivers=["none"], seeds=[0, 1, 2]
    )
    runs = expand(load_sweep(path))
    assert len(runs) == 1 * 2 * 1 * 1 * 3
    assert [r.run_id for r in runs] == [r.run_id for r in expand(load_sweep(path))]
    assert runs[0].run_id == "echo__baseline__none__tiny-llama__s0"
    assert {r.agent.key for r in runs} == {"baseline", "b2"}


def test_agents_without_driver_run_once_per_cell(tmp_path):
    runs = expand(load_sweep(write_sweep(tmp_path, drivers=["gpt-x", "claude-y"])))
    assert [r.driver for r in runs] == ["none"]


@pytest.mark.parametrize(
    "fields, expected",
    [
        ({"agents": ["baseline", "claud"]}, "agents[1]: unknown agent 'claud' (did you mean 'claude'? known: "),
        ({"tasks": ["nope"]}, "tasks[0]: unknown task 'nope' (known: "),
        ({"bogus": 1}, "bogus: unknown key"),
        ({"grader": {"leas_s": 3}}, "grader.leas_s: unknown key"),
        ({"seeds": ["zero"]}, "seeds[0]: Input should be a valid integer (got 'zero')"),
        (
            {"budget": "soon"},
            "budget: expected a positive number of seconds or a duration like '30m', '2h' (got 'soon')",
        ),
        ({"budget": -5}, "budget: expected a positive number of seconds or a duration like '30m', '2h' (got -5)"),
        ({"executor": "k8s"}, "executor: Input should be 'local', 'slurm' or 'auto' (got 'k8s')"),
        ({"models": ["builtin:huge"]}, "models[0].path: unknown built-in model 'huge'"),
        ({"agents": [{"name": "baseline", "args": {"x": 1}}]}, "agents[0].args: unknown argument(s) ['x']"),
        ({"seeds": [1, 1]}, "duplicate entries [1]"),
        ({"resources": {"cpus": 0}}, "resources.cpus: Input should be greater than or equal to 1 (got 0)"),
        ({"cluster": "nowhere"}, "cluster: unknown cluster profile 'nowhere'"),
    ],
)
def test_each_mistake_gets_its_own_clear_error(tmp_path, fields, expected):
    errors = errors_of(write_sweep(tmp_path, **fields))
    assert any(e.startswith(expected) or expected in e for e in errors), errors


def test_all_problems_are_reported_at_once(tmp_path):
    errors = errors_of(write_sweep(tmp_path, tasks=["nope"], agents=["claud"]))
    assert len(errors) == 2


def test_missing_file_and_yaml_syntax(tmp_path):
    with pytest.raises(SpecError, match="absent.yaml does not exist"):
        load_sweep(tmp_path / "absent.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ntasks: [arith\n")
    with pytest.raises(SpecError, match="YAML syntax error"):
        load_sweep(bad)
    lst = tmp_path / "list.yaml"
    lst.write_text("- a\n- b\n")
    with pytest.raises(SpecError, match="expected a mapping"):
        load_sweep(lst)


def test_durations():
    assert parse_duration("10m") == 600 and parse_duration("1.5h") == 5400 and parse_duration(30) == 30
    with pytest.raises(ValueError):
        parse_duration(True)


def test_invalid_sweep_submits_nothing(tmp_path):
    path = write_sweep(tmp_path, agents=["claud"])
    proc = a2rl("launch", str(path), "--sweep-dir", str(tmp_path / "sd"))
    assert proc.returncode == 2
    assert "agents[0]: unknown agent 'claud'" in proc.stderr
    assert not (tmp_path / "sd").exists()


def test_dry_run_lists_runs_and_submits_nothing(tmp_path):
    path = write_sweep(tmp_path, seeds=[0, 1])
    proc = a2rl("launch", str(path), "--dry-run", "--sweep-dir", str(tmp_path / "sd"), check=True)
    assert "echo__baseline__none__tiny-llama__s1" in proc.stdout and "2 runs" in proc.stdout
    assert not (tmp_path / "sd").exists()


def test_relaunch_with_a_changed_spec_is_refused(tmp_path):
    from a2rl.scheduling.launcher import open_sweep

    sd = tmp_path / "sd"
    _, runs = open_sweep(write_sweep(tmp_path), sd)
    assert sd.stat().st_mode & 0o777 == 0o700  # its key, ledger and submissions are its user's alone
    # each run's ledger folder made at once: a shared file system's reader never caches it as missing
    assert runs and all((sd / "ledger" / run.run_id).is_dir() for run in runs)
    with pytest.raises(SpecError, match=r"different spec \(changed: seeds\)"):
        open_sweep(write_sweep(tmp_path, seeds=[5]), sd)
