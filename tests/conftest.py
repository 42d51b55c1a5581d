"""Shared fixtures. Every test runs against a private cache (models, data) and scratch root, so nothing a
developer has on the machine leaks in, and jobs started by the tests see the same settings."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

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
