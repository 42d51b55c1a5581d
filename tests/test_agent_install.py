"""tools/agents/install.sh: the CLIs at the versions pinned in configs/agents/*.yaml, installed once into the
prefix ($A2RL_AGENT_CLIS) and left alone when present; what it prints is where each binary is."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from a2rl.spec.agents import agent_registry
from test_real_clis import CLIS, clis_prefix

REPO = Path(__file__).resolve().parent.parent
INSTALL = REPO / "tools" / "agents" / "install.sh"


def install(*stacks: str, prefix: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(INSTALL), *stacks],
        capture_output=True,
        text=True,
        timeout=1800,
        env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(Path.home()), "A2RL_AGENT_CLIS": str(prefix)},
    )


@pytest.mark.slow  # installs the CLIs where they are missing (npm, about 1 GB); a no-op where they are present
def test_pinned_versions_are_installed_once_and_run():
    prefix = clis_prefix()
    first = install(*CLIS, prefix=prefix)
    assert first.returncode == 0, first.stderr
    lock = prefix / "node_modules" / ".package-lock.json"
    stamp = lock.stat().st_mtime_ns
    again = install(*CLIS, prefix=prefix)
    assert again.returncode == 0, again.stderr
    assert lock.stat().st_mtime_ns == stamp and "installing" not in again.stdout  # nothing redone
    for name in CLIS:
        stack = agent_registry().get(name)
        binary = prefix / "node_modules" / ".bin" / stack.command[0]
        assert f"{name}: {stack.install.npm}@{stack.install.version} already installed" in again.stdout
        assert f"{name} {stack.install.version}: {binary}" in again.stdout
        version = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=120)
        assert stack.install.version in version.stdout, (version.stdout, version.stderr)


def test_unknown_stack_is_refused(tmp_path):
    proc = install("claude", "nosuch", prefix=tmp_path)
    assert proc.returncode == 1
    assert "no installable stack nosuch (installable: claude, codex, gemini, opencode" in proc.stderr
    assert not (tmp_path / "node_modules").exists()
