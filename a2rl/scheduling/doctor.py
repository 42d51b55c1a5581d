"""`a2rl doctor`'s checks: one row per check (ok / warning / refused, with the fix), as a sweep would meet them.

Slurm reachable (sinfo, sbatch, sacct); the partition and its GPUs; the QOS and association limits
(capacity.py's sacctmgr reading); the sweep directory's file system and the isolation, interpreters, tasks and
models seen from a compute node (fscheck.py's probe job); the proxy variables; models and tasks ready offline.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from a2rl.scheduling.base import Runner, run_command
from a2rl.scheduling.capacity import gpu_line, queue_line
from a2rl.scheduling.fscheck import FsVerdict, partition_of
from a2rl.scheduling.node import NodeFacts, tasks_prepared
from a2rl.scheduling.slurm import SlurmScheduler
from a2rl.spec.grid import RunSpec
from a2rl.spec.models import BUILTIN_PREFIX
from a2rl.spec.sweep import SweepSpec

OK, WARNING, REFUSED = "ok", "warning", "refused"


@dataclass(frozen=True)
class Row:
    check: str
    result: str  # ok | warning | refused
    detail: str  # what was found, and the fix where it is not ok


def slurm_rows(
    spec: SweepSpec, runs: list[RunSpec], scheduler: SlurmScheduler, runner: Runner = run_command
) -> list[Row]:
    """Slurm reachable, the partition and its GPUs, the limits on queued jobs and GPUs."""
    missing = [c for c in ("sinfo", "sbatch", "sacct", "squeue") if shutil.which(c) is None]
    if missing:
        return [Row("Slurm reachable", REFUSED, f"not on PATH: {', '.join(missing)}: run on the cluster's login node")]
    info = runner(["sinfo", "-h", "-o", "%P|%a|%D|%G"])
    if info.returncode != 0:
        why = (info.stderr or info.stdout).strip().splitlines()[-1:] or ["no answer"]
        return [Row("Slurm reachable", REFUSED, f"sinfo failed ({why[0]}): ask the admins whether slurmctld is up")]
    acct = runner(["sacct", "-n", "-X", "-S", "now", "-o", "JobID"])
    rows = [
        Row("Slurm reachable", OK, "sinfo, sbatch, squeue answer; sacct answers")
        if acct.returncode == 0
        else Row(
            "Slurm reachable",
            WARNING,
            "sinfo, sbatch, squeue answer; sacct does not (no accounting): a job that died is seen only as gone",
        )
    ]
    rows.append(partition_row(spec, info.stdout))
    g = spec.grader
    jobs = len(runs) + g.first_workers + 1  # the runs, the graders, the top-up job
    gpus = len(runs) * spec.resources.gpus + g.most_workers * g.gpus
    for name, line in (
        ("QOS and association limits", queue_line(scheduler, jobs)),
        ("GPU limits", gpu_line(scheduler, gpus)),
    ):
        text = line.split(": ", 1)[1]
        rows.append(Row(name, WARNING if "unknown" in text or "do not fit" in text else OK, text))
    return rows


def partition_row(spec: SweepSpec, sinfo: str) -> Row:
    """The sweep's partition (or the default, starred) from `sinfo -h -o %P|%a|%D|%G`: up, and GPUs if asked."""
    wanted = partition_of(spec)
    parts: dict[str, tuple[str, int, int]] = {}
    default = None
    for line in sinfo.splitlines():
        name, avail, count, gres = (line.strip().split("|") + ["", "", ""])[:4]
        if not name:
            continue
        if name.endswith("*"):
            name = default = name[:-1]
        gpus = sum(int(n) for n in re.findall(r"gpu(?::[^:(,]+)?:(\d+)", gres)) * int(count or 0)
        _, prev_nodes, prev_gpus = parts.get(name, ("", 0, 0))
        parts[name] = (avail, prev_nodes + int(count or 0), prev_gpus + gpus)
    name = wanted or default
    if name is None or name not in parts:
        known = ", ".join(sorted(parts)) or "none"
        return Row(
            "partition and GPUs", REFUSED, f"partition {name!r} not found (known: {known}): set resources.partition"
        )
    avail, nodes, gpus = parts[name]
    need = max(spec.resources.gpus, spec.grader.gpus)
    detail = f"partition {name}: {avail}, {nodes} node(s), {gpus} GPU(s)"
    if avail != "up":
        return Row("partition and GPUs", REFUSED, f"{detail}: ask the admins, or pick another partition")
    if need and gpus < need:
        return Row(
            "partition and GPUs", REFUSED, f"{detail}; the sweep's jobs need {need} GPU(s) each: pick a GPU partition"
        )
    return Row("partition and GPUs", OK, detail)


def redact(url: str) -> str:
    return re.sub(r"//[^@/]+@", "//***@", url)


def proxy_row(here: dict[str, str], there: NodeFacts | None, network: str) -> Row:
    """The proxy variables here, and whether the compute node's jobs get the same."""
    shown = ", ".join(f"{k}={redact(v)}" for k, v in sorted(here.items())) or "none set"
    if there is not None and there.proxies != here:
        return Row(
            "proxy",
            WARNING,
            f"{shown} here, but on {there.host}: {', '.join(sorted(there.proxies)) or 'none'}: "
            "export the same variables where you launch (jobs inherit them)",
        )
    use = "agents and clients connect directly" if not here else "jobs inherit them"
    return Row("proxy", OK, f"{shown} (network: {network}): {use}")


def fs_rows(verdict: FsVerdict) -> list[Row]:
    """The file system and, from the compute node, the isolation."""
    rows = [Row("file system", REFUSED if verdict.refused else OK, verdict.refused or verdict.line())]
    if verdict.notes and not verdict.refused:
        rows[0] = Row("file system", WARNING, f"{verdict.line()}; {'; '.join(verdict.notes)}")
    facts = verdict.facts
    if facts is None:
        rows.append(Row("isolation (compute node)", WARNING, "not checked: the file system check stopped first"))
    elif facts.isolation.startswith("refused"):
        rows.append(
            Row("isolation (compute node)", REFUSED, f"on {facts.host}: {facts.isolation.removeprefix('refused: ')}")
        )
    else:
        level = WARNING if facts.isolation == "none" else OK
        rows.append(Row("isolation (compute node)", level, f"{facts.isolation} on {facts.host}"))
    return rows


def offline_row(spec: SweepSpec, verdict: FsVerdict | None) -> Row:
    """Models and tasks ready without the internet (compute nodes often have none)."""
    from a2rl.scheduling.node import model_dir

    unprepared = sorted(t for t, ok in tasks_prepared(spec).items() if not ok)
    missing = sorted(
        m.name for m in spec.model_entries if not m.path.startswith(BUILTIN_PREFIX) and not model_dir(m.path).is_dir()
    )
    diffs = [d for d in (verdict.differences if verdict else []) if "task" in d or "model" in d or "interpreter" in d]
    if missing or diffs:
        what = (
            [f"model directory missing: {', '.join(missing)} (a2rl fetch-model where there is internet)"]
            if missing
            else []
        )
        return Row("models and tasks offline", REFUSED, "; ".join(what + diffs))
    if unprepared:
        return Row(
            "models and tasks offline",
            WARNING,
            f"not prepared yet: {', '.join(unprepared)}: the launch prepares them here (`a2rl prepare` where there is "
            "internet for tasks that download)",
        )
    return Row(
        "models and tasks offline",
        OK,
        f"{len(spec.tasks)} task(s) prepared, {len(spec.model_entries)} model(s) on disk",
    )


def exit_code(rows: list[Row]) -> int:
    return 1 if any(r.result == REFUSED for r in rows) else 0


def render(rows: list[Row]) -> str:
    from tabulate import tabulate

    return tabulate([(r.check, r.result, r.detail) for r in rows], headers=["check", "result", "detail / fix"])


def local_rows(directory: Path) -> list[Row]:
    return [Row("Slurm reachable", OK, f"not used (local executor); the sweep runs on this node in {directory}")]
