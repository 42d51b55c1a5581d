"""Per-run caps (run/caps.py, sweep `limits`) piece by piece; tests/test_hostile_agent.py runs them all against a
hostile agent in a real sweep."""

from __future__ import annotations

import sys

from a2rl.run.caps import RunCaps, tree_bytes
from a2rl.run.process import AgentProcess
from a2rl.spec.sweep import RunLimits


def test_agent_log_is_cut_at_its_cap_and_the_agent_never_blocks(tmp_path):
    log = tmp_path / "agent.log"
    log.write_text("[a2rl] set-up line\n")  # the job's own lines count too
    flood = "import sys\nfor _ in range(4096): sys.stdout.write('x' * 1023 + '\\n')\nprint('finished', flush=True)"
    proc = AgentProcess(
        [sys.executable, "-c", flood], env={"PATH": "/usr/bin:/bin"}, cwd=tmp_path, log=log, log_cap=64 << 10
    )
    assert proc.proc.wait(timeout=120) == 0  # 4 MiB written through a pipe nobody logs: it was drained
    proc.reap_strays()
    text = log.read_text()
    assert proc.log_cut and "agent.log cut here" in text and "finished" not in text
    assert len(text) < (64 << 10) + 200


def test_without_a_cap_the_log_keeps_everything(tmp_path):
    log = tmp_path / "agent.log"
    proc = AgentProcess([sys.executable, "-c", "print('x' * 100000)"], env={}, cwd=tmp_path, log=log)
    proc.proc.wait(timeout=60)
    proc.reap_strays()
    assert not proc.log_cut and len(log.read_text()) == 100001


def test_a_workspace_past_its_cap_is_named(tmp_path):
    ws = tmp_path / "ws"
    (ws / "code").mkdir(parents=True)
    (ws / "code" / "small").write_bytes(b"x" * 4096)
    (ws / "link").symlink_to("/usr")  # links are not followed
    caps = RunCaps(
        RunLimits(workspace_gb=1 / 1024), name="a2rl-test-unused", workspace=ws, gpus=0, mem_gb=1, sandboxed=False
    )
    caps.cgroup.close()
    assert 4096 <= tree_bytes(ws) < 1 << 20 and caps.over_quota() is None and caps.hit == []
    (ws / "code" / "big").write_bytes(b"x" * (2 << 20))
    assert caps.over_quota().startswith("quota: the workspace holds 0.00 GiB, past limits.workspace_gb=0.000976")
    assert [h.split(":")[0] for h in caps.hit] == ["workspace"]


def test_the_process_cap_is_set_inside_the_sandbox(tmp_path):
    """RLIMIT_NPROC is applied by the sandbox's first command (its user namespace exists by then: the count is
    the sandbox's own), never to an unsandboxed agent, whose count would be the launcher user's."""
    inside = RunCaps(
        RunLimits(processes=99), name="a2rl-test-unused", workspace=tmp_path, gpus=0, mem_gb=1, sandboxed=True
    )
    outside = RunCaps(
        RunLimits(processes=99), name="a2rl-test-unused2", workspace=tmp_path, gpus=0, mem_gb=1, sandboxed=False
    )
    for c in (inside, outside):
        c.close()
    assert inside.inner_argv(["agent"])[1:] == ["--nproc=99:99", "--", "agent"]
    assert outside.inner_argv(["agent"]) == ["agent"]


def test_without_a_memory_cgroup_each_process_is_held_by_rlimit_data(tmp_path, monkeypatch):
    """Where no memory cgroup can be made (a user's own machine), the agent's processes get RLIMIT_DATA: an
    allocation past the cap fails; the interpreter itself, which reserves far more address space than it
    writes, still starts."""
    monkeypatch.setattr("a2rl.run.caps.CGROUP_ROOT", tmp_path / "no-cgroups")
    caps = RunCaps(
        RunLimits(mem_gb=0.5), name="a2rl-test-unused", workspace=tmp_path, gpus=0, mem_gb=8, sandboxed=False
    )
    assert caps.cgroup.dirs == {} and caps.rlimit_data == 512 << 20
    hog = "import sys\ntry:\n    x = bytearray(1 << 30)\nexcept MemoryError:\n    sys.exit(3)"
    log = tmp_path / "agent.log"
    proc = AgentProcess([sys.executable, "-c", hog], env={}, cwd=tmp_path, log=log, preexec=caps.preexec)
    assert proc.proc.wait(timeout=60) == 3
    proc.reap_strays()
    gpu = RunCaps(RunLimits(mem_gb=0.5), name="a2rl-test-unused", workspace=tmp_path, gpus=1, mem_gb=8, sandboxed=False)
    assert gpu.rlimit_data is None
