"""The package as a user installs it: a built wheel carries the tasks, configs and Slurm job set-up, and a2rl
installed from it (no source checkout on its path, no A2RL_HOME) lists them and runs a sweep from another
directory."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
import yaml

from conftest import REPO

pytestmark = pytest.mark.slow


def run(*argv, cwd: Path, env: dict, timeout: float = 900) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{argv} exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def test_the_wheel_ships_tasks_and_configs_and_runs_a_sweep_from_elsewhere(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "A2RL_HOME")}
    src = tmp_path / "src"  # a copy of what a source distribution holds: the build leaves no trace in the checkout
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "a2rl", "tasks", "configs", "slurm"):
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(REPO / name, src / name)
    run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "-q",
        "-w",
        tmp_path / "dist",
        src,
        cwd=tmp_path,
        env=env,
    )
    (wheel,) = (tmp_path / "dist").glob("a2rl-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {
        "a2rl/share/tasks/arith/task.yaml",
        "a2rl/share/configs/sweeps/demo.yaml",
        "a2rl/share/configs/agents/baseline.yaml",
        "a2rl/share/slurm/job-setup.sh",
    } <= names
    assert not any("__pycache__" in n for n in names)

    # a fresh venv with a2rl from the wheel only; its dependencies (torch...) come from the project's venv, after it
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path, env=env)
    python = venv / "bin" / "python"
    site = Path(
        run(
            python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=tmp_path, env=env
        ).stdout.strip()
    )
    (site / "project-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    run(
        sys.executable,
        "-m",
        "pip",
        "--python",
        python,
        "install",
        "-q",
        "--no-deps",
        "--no-index",
        wheel,
        cwd=tmp_path,
        env=env,
    )

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = run(python, "-c", "import a2rl; print(a2rl.__file__)", cwd=elsewhere, env=env).stdout
    assert where.startswith(str(site)), where
    tasks = run(venv / "bin" / "a2rl", "ls", "tasks", cwd=elsewhere, env=env).stdout
    assert f"{site}/a2rl/share/tasks/arith/task.yaml" in tasks and str(REPO) not in tasks

    # the demo's dry run, then a tiny sweep of the shipped arith task, launched and followed to its table
    agent_python = REPO / ".venv-agent" / "bin" / "python"
    env["A2RL_AGENT_PYTHON"] = str(agent_python)
    demo = site / "a2rl" / "share" / "configs" / "sweeps" / "demo.yaml"
    dry = run(python, "-m", "a2rl.launch", demo, "--dry-run", cwd=elsewhere, env=env).stdout
    assert "4 runs (dry run: nothing submitted)" in dry, dry
    (elsewhere / "tiny.yaml").write_text(
        yaml.safe_dump(
            {
                "name": "tiny",
                "tasks": ["arith"],
                "agents": ["baseline"],
                "models": ["builtin:tiny-llama"],
                "seeds": [0],
                "budget": 60,
                "executor": "local",
                "grader": {"poll_s": 0.1, "idle_timeout_s": 120},
            }
        )
    )
    run(venv / "bin" / "a2rl", "validate", "tiny.yaml", cwd=elsewhere, env=env)
    out = run(venv / "bin" / "a2rl", "launch", "tiny.yaml", "--wait", cwd=elsewhere, env=env).stdout
    assert "1/1 done" in out and "0 failed" in out, out
    assert (elsewhere / "a2rl-sweeps" / "tiny" / "runs").is_dir()
