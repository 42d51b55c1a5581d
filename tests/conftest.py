"""Shared fixtures. Every test runs against a private cache (models, data) and scratch root, so nothing a
developer has on the machine leaks in, and jobs started by the tests see the same settings."""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from filelock import FileLock

from fakes import FakeClock

_SESSION = Path(tempfile.mkdtemp(prefix="a2rl-tests-"))
os.environ["A2RL_CACHE"] = str(_SESSION / "cache")
os.environ["A2RL_SCRATCH"] = str(_SESSION / "scratch")
# Every process the tests start inherits this mark (and the running test's id below), so that the end of the
# session can find those still alive, wherever they were reparented (Slurm jobs too: sbatch exports the env).
os.environ["A2RL_TEST_SESSION"] = _SESSION.name

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"


def _proc(pid: str) -> tuple[int, str, dict[str, str]] | None:
    """(parent pid, command line, environment) of a live process; None for a zombie or one gone/unreadable."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        state, ppid = stat.rpartition(")")[2].split()[:2]
        if state in "ZX":
            return None
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        env = dict(
            e.partition("=")[::2]
            for e in Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace").split("\0")
            if e
        )
    except (OSError, ValueError):
        return None
    return int(ppid), cmd, env


def leftover_processes() -> dict[int, str]:
    """pid → 'TEST: COMMAND' for each live process the tests started: one with this session's mark, or a
    descendant of one (or of pytest) whose environment was replaced. Pytest and its ancestors are not."""
    procs = {int(pid): p for pid in os.listdir("/proc") if pid.isdigit() and (p := _proc(pid))}
    me, ours = os.getpid(), {}
    ancestors, pid = set(), me
    while pid in procs and pid not in ancestors:
        ancestors.add(pid)
        pid = procs[pid][0]

    def owner(pid: int, seen: frozenset = frozenset()) -> str | None:
        if pid == me:
            return "(a test)"
        if pid not in procs or pid in ancestors or pid in seen:
            return None
        ppid, _, env = procs[pid]
        if env.get("A2RL_TEST_SESSION") == _SESSION.name:
            return env.get("A2RL_TEST_NODE", "(collection or a session fixture)")
        return owner(ppid, seen | {pid})

    for pid, (_, cmd, _) in procs.items():
        if pid not in ancestors and (test := owner(pid)) is not None:
            ours[pid] = f"{test}: {cmd[:200]}"
    return ours


@pytest.fixture(scope="session", autouse=True)
def no_process_left_behind():
    """Fails the session (at its last teardown, after every other fixture's) if a process a test started is
    still alive, naming the test that started it. A few seconds' grace for processes already ending."""
    yield
    deadline = time.monotonic() + 10
    while (left := leftover_processes()) and time.monotonic() < deadline:
        time.sleep(0.5)
    if left:
        pytest.fail(
            "processes the tests started are still alive:\n"
            + "\n".join(f"  pid {pid}: {what}" for pid, what in sorted(left.items())),
            pytrace=False,
        )


@pytest.fixture(autouse=True)
def _test_node(request):
    """The running test's id, inherited by the processes it starts (see leftover_processes)."""
    os.environ["A2RL_TEST_NODE"] = request.node.nodeid
    yield
    os.environ.pop("A2RL_TEST_NODE", None)


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    from a2rl.store.modeldirs import resolve_model

    return resolve_model("builtin:tiny-llama")


@pytest.fixture(scope="session")
def hello_model(tiny_model, tmp_path_factory) -> Path:
    """The tiny model trained to say HELLO (tests/test_local_driver_protocols.py): trained once for the session,
    served read-only by the local driver (transformers) and by `vllm serve` (tests/test_vllm_real.py)."""
    from test_local_driver_protocols import HELLO, tuned_model

    return tuned_model(tiny_model, HELLO, tmp_path_factory.mktemp("talking"), steps=40)


# The demo sweep's reference agent on a shorter schedule (configs/sweeps/demo.yaml's grid, task, model, machinery):
# enough to beat the untrained model's 0 on arith on every seed (tests/test_offline_levels.py trains as long)
DEMO_SHORT = {"sft_steps": 150, "grpo_steps": 4}


def demo_spec(dir: Path, **overrides) -> Path:
    spec = yaml.safe_load((REPO / "configs" / "sweeps" / "demo.yaml").read_text())
    spec["agents"] = [{"name": "pipeline", "args": DEMO_SHORT}, "baseline"]
    spec.update(overrides)
    path = dir / "demo.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@contextmanager
def busy_loops(n: int = 2) -> Iterator[None]:
    """`n` shell busy loops competing for the cores while the block runs (a loaded machine), killed after."""
    loops = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(n)]
    try:
        yield
    finally:
        for p in loops:
            p.kill()
            p.wait()


@pytest.fixture(scope="session")
def demo_sweep(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """The README's demo sweep (configs/sweeps/demo.yaml as shipped: its fixed schedule) run once on the local
    executor with `launch --wait` while two busy loops compete for the cores, for the tests that read it (its
    table, results, report, pages): (the launcher's process, the sweep directory). Read it, do not change it."""
    tmp = tmp_path_factory.mktemp("demo")
    seed = re.search(r"A2RL_HELDOUT_SEED:-(\d+)", (REPO / "tools" / "demo.sh").read_text()).group(1)
    os.environ["A2RL_HELDOUT_SEED"] = seed  # as tools/demo.sh sets it, for the launcher and its jobs
    try:
        with busy_loops(2):
            proc = a2rl(
                "launch",
                str(REPO / "configs" / "sweeps" / "demo.yaml"),
                "--sweep-dir",
                str(tmp / "sd"),
                "--wait",
                timeout=2400,
            )
    finally:
        del os.environ["A2RL_HELDOUT_SEED"]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, tmp / "sd"


@pytest.fixture
def fake_clock() -> FakeClock:
    """Virtual time; install it where the code under test reads the clock:
    monkeypatch.setattr(a2rl.run.budget, "time", fake_clock)."""
    return FakeClock()


def slurm_available() -> bool:
    """Whether the local Slurm cluster answers. Under tools/test.sh (A2RL_SLURM=1) it must: a missing cluster
    is an error there, not a reason to skip."""
    try:
        up = subprocess.run(["sinfo", "-h"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        up = False
    if not up and os.environ.get("A2RL_SLURM") == "1":
        raise RuntimeError("A2RL_SLURM=1 but no Slurm cluster answers `sinfo`")
    return up


def write_sweep(dir: Path, name: str = "t", **fields) -> Path:
    """A sweep.yaml in `dir`; fields override a small local default on the echo test task."""
    spec = {
        "name": name,
        "tasks": ["echo"],
        "agents": ["baseline"],
        "models": ["builtin:tiny-llama"],
        "seeds": [0],
        "budget": 60,
        "executor": "local",
        "task_paths": [str(FIXTURES / "tasks")],
        "agent_paths": [str(FIXTURES / "agents")],
        "grader": {"poll_s": 0.05, "lease_s": 5, "idle_timeout_s": 120},
    }
    spec.update(fields)
    path = dir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def a2rl(*args: str, timeout: float = 600, check: bool = False, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run the real command line, as a user would."""
    proc = subprocess.run(
        [sys.executable, "-m", "a2rl", *args], capture_output=True, text=True, timeout=timeout, cwd=cwd
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"a2rl {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def until(cond, timeout: float, what: str, every: float = 0.5):
    """cond()'s first truthy value. Liveness only (a generous limit so a hung test ends), never a speed check."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := cond():
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def errors_of(path) -> list[str]:
    """The lines of the SpecError that loading the sweep at `path` raises, without their field prefix."""
    from a2rl.errors import SpecError
    from a2rl.spec.sweep import load_sweep

    with pytest.raises(SpecError) as e:
        load_sweep(path)
    return [line.split(": ", 1)[1] for line in e.value.lines]


# Unprivileged users (tests/test_user_world.py, tests/test_cluster_user.py): root creates them, they run a2rl.


def kill_user(uid: int) -> None:
    """SIGKILL every process of a test's user and wait for them to end (userdel refuses a user still running)."""
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


# useradd and userdel fail at once ("cannot lock /etc/passwd") while another holds the lock: tools/test-phases.sh
# runs tests that make users in parallel pytest processes, so they take turns
USERS_LOCK = FileLock("/tmp/a2rl-tests-users.lock", timeout=120)


@contextlib.contextmanager
def unprivileged_user(name: str) -> Iterator[pwd.struct_passwd]:
    """A new user with a home of its own (useradd -m: mode 0755 under Debian's UMASK 022), removed afterwards
    with its home and every process it left."""
    with USERS_LOCK:
        subprocess.run(["userdel", "-r", name], capture_output=True)  # a previous run's, killed before its clean-up
        subprocess.run(["useradd", "-m", "-s", "/bin/bash", name], check=True)
    user = pwd.getpwnam(name)
    try:
        yield user
    finally:
        kill_user(user.pw_uid)
        with USERS_LOCK:
            gone = subprocess.run(["userdel", "-r", name], capture_output=True, text=True)
        if gone.returncode != 0:  # not an assertion here: it would hide the test's own failure
            print(f"userdel -r {name} failed: {gone.stderr}")


def wheel_sources() -> dict[str, str]:
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


def user_env(user: pwd.struct_passwd, path: str) -> dict[str, str]:
    """The environment a user's login gives (HOME, USER, PATH), with a pip cache of its own outside HOME
    (/var/tmp/a2rl-pip-<user>, kept between runs) and this machine's wheel sources, so that its set-up is cheap;
    nothing it installs needs root or a compiler either way."""
    cache = Path("/var/tmp") / f"a2rl-pip-{user.pw_name}"
    cache.mkdir(parents=True, exist_ok=True)
    subprocess.run(["chown", "-R", f"{user.pw_uid}:{user.pw_gid}", str(cache)], check=True)
    return {
        "HOME": user.pw_dir,
        "USER": user.pw_name,
        "LOGNAME": user.pw_name,
        "PATH": path,
        "LANG": "C.UTF-8",
        "PIP_CACHE_DIR": str(cache),
        "PIP_NO_INPUT": "1",
        # this machine's wheelhouse (the CPU torch wheel) and mirror, where the launcher's pip has them:
        # without them torch==2.13.0 is PyPI's CUDA build (.venv 5.5 GB, .venv-agent 5.2 GB, 25 minutes)
        **wheel_sources(),
        # the session's process check follows what the user starts, Slurm jobs included (see above)
        **{k: os.environ[k] for k in ("A2RL_TEST_SESSION", "A2RL_TEST_NODE") if k in os.environ},
    }


def copy_checkout(dest: Path) -> None:
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


def pytest_addoption(parser):
    parser.addoption(
        "--phase",
        choices=("all", *PHASES),
        default="all",
        help="one of tools/test.sh's runs (tests/conftest.py's phase_of): the tests marked sidebyside, the fast "
        "ones that run beside them, phase 2's Slurm or local lane, or the tests that run apart",
    )


# tools/test.sh's phase 1 hands tests to its xdist workers a group at a time, a group's tests one after another in
# one worker: a file's sidebyside tests are a group (a module-scoped fixture is built once), and these files'
# (the sweeps that train for minutes, and the ordinary account's, whose set-up and sweep beside them made the real
# CLIs' budget runs fail at 2026-11-28's load) one group, so that at most one of them runs at a time, beside the
# tests that wait
CPU_HEAVY = {"tests/test_demo.py", "tests/test_offline_levels.py", "tests/test_cluster_user.py"}
# the longest groups, handed out first (xdist hands out groups in collection order) so that none starts late
LONGEST_FIRST = ("cpu",)


def phase_group(nodeid: str) -> str:
    file = nodeid.split("::")[0]
    return "cpu" if file in CPU_HEAVY else file


@pytest.hookimpl(optionalhook=True)  # xdist's hook: unknown where xdist is not installed
def pytest_xdist_make_scheduler(config, log):
    """Scheduling by phase_group (xdist's loadgroup reads xdist_group marks by rewriting node ids, which pytest 9
    ignores; a scope scheduler with our own scopes works with either)."""
    from xdist.scheduler import LoadScopeScheduling

    class PhaseGroups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return phase_group(nodeid)

    return PhaseGroups(config, log)


# Tests in these files run in phase 2's Slurm lane whatever their marks, so never beside another test on the
# cluster: they stop Slurm daemons and nodes (test_slurm_nodes), add and delete a QOS and fill it (test_slurm_busy)
SLURM_FILES = {"test_slurm_nodes.py", "test_slurm_busy.py"}
# Tests in these files run apart (phase 3), nothing beside them: they fork-bomb, hog memory and fill /tmp
# (test_hostile_agent), or set up a new user's venv, which beside phase 1 made the real CLIs' budget runs fail
# (test_user_world, 2026-11-28)
APART_FILES = {"test_hostile_agent.py", "test_user_world.py"}
# session fixtures a test beside others must not take, too costly to build again in each worker (the demo under two
# busy loops, the trained HELLO model): phase 2's local lane builds each once
ALONE_FIXTURES = {"demo_sweep", "hello_model"}
PHASES = ("sidebyside", "fast", "slurm", "local", "apart")


def phase_of(item) -> str:
    """Where tools/test-phases.sh runs a test: "sidebyside" (marked so: phase 1's xdist workers), "fast" (not
    slow, no Slurm, outside the files and fixtures above: one plain pytest beside phase 1, one test at a time as in
    the fast layer), "slurm" or "local" (phase 2's two lanes side by side, each one test at a time: on the Slurm
    cluster or off it) or "apart" (phase 3, one at a time, nothing beside it)."""
    if item.get_closest_marker("sidebyside") is not None:
        return "sidebyside"
    if Path(str(item.path)).name in APART_FILES:
        return "apart"
    if item.get_closest_marker("slurm") is not None or Path(str(item.path)).name in SLURM_FILES:
        return "slurm"
    alone = set(getattr(item, "fixturenames", ())) & ALONE_FIXTURES
    return "local" if item.get_closest_marker("slow") is not None or alone else "fast"


def pytest_collection_modifyitems(config, items):
    """--phase keeps the tests of one of tools/test-phases.sh's runs (phase_of); the rest are deselected, as -m
    would."""
    phase = config.getoption("--phase")
    if phase == "all":
        return
    side = [phase_of(item) == phase for item in items]
    if not all(side):
        config.hook.pytest_deselected(items=[item for item, keep in zip(items, side) if not keep])
        items[:] = [item for item, keep in zip(items, side) if keep]
    if phase == "sidebyside":  # a stable sort: each worker collects the same order
        first = {group: i for i, group in enumerate(LONGEST_FIRST)}
        items.sort(key=lambda item: first.get(phase_group(item.nodeid), len(first)))
    if phase == "local":  # the demo under two busy loops last, when the Slurm lane beside it has most likely ended
        items.sort(key=lambda item: "demo_sweep" in getattr(item, "fixturenames", ()))
