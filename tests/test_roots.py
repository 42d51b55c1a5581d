"""The directories a2rl writes outside a sweep (a2rl/spec/roots.py): the default scratch root is each user's own,
and a scratch, data or cache root that cannot be used is one line naming the setting that moves it, from the
command line as from a run, never a traceback."""

from __future__ import annotations

import os
import pwd
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from a2rl.errors import RootError
from a2rl.scheduling.launcher import open_sweep
from a2rl.spec.roots import default_scratch, expand_root, private_dir, usable_dir
from conftest import write_sweep

NOBODY = 65534


@pytest.fixture
def tmpdir_env(tmp_path, monkeypatch):
    """$TMPDIR (tempfile's <tmp>) pointed at a world-writable, sticky directory, as /tmp is."""
    shared = tmp_path / "shared-tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    monkeypatch.setenv("TMPDIR", str(shared))
    monkeypatch.setattr(tempfile, "tempdir", None)
    return shared


def test_the_default_scratch_is_this_users_own_and_private(tmpdir_env, tmp_path, monkeypatch):
    monkeypatch.delenv("A2RL_SCRATCH")
    me = pwd.getpwuid(os.getuid()).pw_name
    assert default_scratch() == tmpdir_env / f"a2rl-scratch-{me}"
    sweep, _ = open_sweep(write_sweep(tmp_path), tmp_path / "sd")
    root = sweep.scratch_root()
    assert root == default_scratch()
    st = os.lstat(root)
    assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.getuid()
    assert sweep.scratch_root() == root  # found again as is


@pytest.mark.skipif(os.getuid() != 0, reason="making a directory another user's takes root")
def test_a_default_scratch_another_user_made_first_is_refused(tmpdir_env):
    squatted = default_scratch()
    squatted.mkdir(mode=0o777)
    os.chown(squatted, NOBODY, NOBODY)
    with pytest.raises(RootError, match=r"belongs to another user \(nobody\).*A2RL_SCRATCH"):
        private_dir(squatted, "scratch root", "set A2RL_SCRATCH")


def test_a_private_root_others_can_write_or_a_link_is_refused(tmp_path):
    open_ = tmp_path / "open"
    open_.mkdir()
    open_.chmod(0o777)
    with pytest.raises(RootError, match="writable by other users .mode 777"):
        private_dir(open_, "scratch root", "fix")
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    with pytest.raises(RootError, match="not a directory"):
        private_dir(link, "scratch root", "fix")


def test_a_root_that_cannot_be_created_names_its_setting(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(RootError) as e:
        usable_dir(blocker / "scratch", "scratch root", "set A2RL_SCRATCH")
    assert len(e.value.lines) == 1 and "scratch root" in e.value.lines[0] and "A2RL_SCRATCH" in e.value.lines[0]


@pytest.mark.parametrize(
    "variable, field, setting",
    [
        ("A2RL_SCRATCH", None, "scratch_root"),
        (None, "data_root", "data_root"),
        ("A2RL_CACHE", None, "A2RL_CACHE"),
    ],
)
def test_launch_with_a_root_it_cannot_use_is_one_line(tmp_path, tiny_model, variable, field, setting):
    """The launch (its preparation and audit) stops with one line naming the setting: no traceback."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    env = {**os.environ}
    if variable:
        env[variable] = str(blocker / "root")
    spec = write_sweep(tmp_path, **({field: str(blocker / "root")} if field else {}))
    proc = subprocess.run(
        [sys.executable, "-m", "a2rl", "launch", str(spec), "--sweep-dir", str(tmp_path / "sd")],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert setting in errors[0] and str(blocker) in errors[0]


def test_a_run_whose_scratch_root_cannot_be_used_fails_with_that_line(tmp_path, tiny_model, monkeypatch):
    """In the job (where the scratch root is resolved, on the node): the run ends failed with the one line as
    its reason, no traceback."""
    from a2rl.run.job import AgentRun

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("A2RL_SCRATCH", str(blocker / "root"))
    sweep, _ = open_sweep(write_sweep(tmp_path, grader={"max_wait_s": 1}), tmp_path / "sd")
    (run,) = sweep.runs()
    result = AgentRun(sweep, run.run_id).execute()
    assert result.status == "failed"
    assert (
        result.failure_reason.startswith("run set-up failed: scratch root ")
        and "A2RL_SCRATCH" in result.failure_reason
        and "\n" not in result.failure_reason
    ), result.failure_reason


def test_a_node_local_scratch_root_expands_where_it_is_used(monkeypatch, tmp_path):
    """`$TMPDIR` is the node's in a job; off the nodes (the launcher's audit) an unset TMPDIR is the system's
    temporary directory, as for any program. Another unset variable is one line, never a directory named
    `$SCRATCH` under the working directory."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    assert expand_root("$TMPDIR/a2rl", "scratch root", "fix") == tmp_path / "a2rl"
    monkeypatch.delenv("TMPDIR")
    assert expand_root("${TMPDIR}/a2rl", "scratch root", "fix") == Path(tempfile.gettempdir()) / "a2rl"
    monkeypatch.delenv("A2RL_NO_SUCH_VAR", raising=False)
    with pytest.raises(RootError, match=r"scratch root /x/\$A2RL_NO_SUCH_VAR: \$A2RL_NO_SUCH_VAR is not set on "):
        expand_root("/x/$A2RL_NO_SUCH_VAR", "scratch root", "fix")
