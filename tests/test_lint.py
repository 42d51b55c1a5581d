"""ruff's lint rules and its formatter (pyproject.toml [tool.ruff]) hold over the package, the tasks, the agent
stacks' scripts under configs/, the tests, the tools and the top-level scripts (setup.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# every folder that holds Python, and the top-level .py files; test_every_python_file_is_linted keeps it whole
TARGETS = ["a2rl", "configs", "tasks", "tests", "tools", *sorted(p.name for p in REPO.glob("*.py"))]


def ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args, "--no-cache", *TARGETS],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_ruff_check_passes():
    proc = ruff("check", "--output-format", "concise")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ruff_format_leaves_every_file_as_it_is():
    proc = ruff("format", "--check")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_python_file_is_linted():
    tracked = subprocess.run(["git", "ls-files", "*.py"], cwd=REPO, capture_output=True, text=True)
    if tracked.returncode != 0:
        pytest.skip("not a git checkout (an unpacked sdist): no list of files to compare with")
    outside = [f for f in tracked.stdout.split() if not any(f == t or f.startswith(t + "/") for t in TARGETS)]
    assert not outside, f"add {outside} to TARGETS"
