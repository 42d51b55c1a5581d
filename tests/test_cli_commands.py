"""The commands that only read: `a2rl validate` checks a sweep as a launch would and leaves no trace, `a2rl ls`
lists the registries, `a2rl --version`."""

from __future__ import annotations

import os
import subprocess
import sys

from a2rl.cli.main import main
from a2rl.version import __version__
from conftest import a2rl as run_a2rl
from conftest import write_sweep


def test_validate_checks_a_sweep_and_writes_and_builds_nothing(tmp_path, capsys):
    sweep = write_sweep(tmp_path, seeds=[0, 1])
    before = sorted(tmp_path.rglob("*"))
    env = {**os.environ, "A2RL_CACHE": str(tmp_path / "cache")}  # where a built-in model would be built
    proc = subprocess.run(
        [sys.executable, "-m", "a2rl", "validate", str(sweep)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "valid: 2 runs" in proc.stdout and "not checked" not in proc.stdout  # the built-in is sized unbuilt
    assert "model sizes: tiny-llama 0.00B (from the built-in recipe)" in proc.stdout
    # the capacity plan: what it cannot know yet it says so
    assert "capacity plan (local executor" in proc.stdout
    assert (
        "runs: 2 jobs x 11m (budget 1m + set-up margin 10m) x 0 GPU, 1 CPU: 0.0 GPU-hours, 0.37 CPU-hours"
        in proc.stdout
    )
    assert "x 10 submissions + 1 baseline(s): unknown (task echo is not prepared (no heldout_size))\n" in proc.stdout
    assert "queue limits: none (the local executor)" in proc.stdout
    assert sorted(tmp_path.rglob("*")) == before  # no sweep directory, no model, no prepared data

    bad = write_sweep(tmp_path, name="bad", tasks=["no-such-task"], agents=["baseline", "no-such-agent"])
    assert main(["validate", str(bad)]) == 2
    errors = capsys.readouterr().err.splitlines()
    assert len(errors) == 2 and all(e.startswith("error: ") for e in errors), errors
    assert "no-such-task" in errors[0] + errors[1] and "no-such-agent" in errors[0] + errors[1]


def test_ls_lists_each_registry_and_version_prints_the_version(capsys):
    for what, expected in [
        ("tasks", "level 1, rule, qa_short"),
        ("agents", "pipeline"),
        ("clusters", "generic"),
        ("presets", "greedy"),
    ]:
        assert main(["ls", what]) == 0
        assert expected in capsys.readouterr().out
    assert run_a2rl("--version", check=True).stdout.strip() == f"a2rl {__version__}"
    assert run_a2rl("ls", "nothing").returncode == 2
