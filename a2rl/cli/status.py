"""`a2rl status`: one line per run: state (from the run's own files, checked against the scheduler), job, best score,
tokens and cost so far (where the agent's transcript reports them), and what the run keeps in the sweep directory
(recording/diskuse.py: its frozen submissions, code blobs and run directory, against storage.run_gb)."""

from __future__ import annotations

import argparse
from pathlib import Path

from a2rl.cli.common import open_sweep_dir

HEADERS = ["run", "state", "job", "scheduler", "submissions", "best", "tokens", "cost $", "disk GiB", "reason"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("sweep_dir", type=Path)


def times(n: int) -> str:
    return {1: "once", 2: "twice"}.get(n, f"{n} times")


def engine_line(beat, backend: str) -> str:
    """A grader's engine in words: "vLLM engine: started twice, reloaded weights 3 times" (a start loads a model
    afresh; a reload swaps the next submission's weights into the running engine)."""
    name = {"vllm": "vLLM engine", "transformers": "transformers engine"}.get(backend, "grading engine")
    said = [f"started {times(beat.starts)}" if beat.starts else "not started yet"]
    said += [f"reloaded weights {times(beat.reloads)}"] if beat.reloads else []
    if beat.reload_failures:
        said.append(
            f"{beat.reload_failures} failed reload{'s' if beat.reload_failures > 1 else ''} (each a fresh start)"
        )
    return f"{name}: {', '.join(said)}"


def run(args: argparse.Namespace) -> int:
    from tabulate import tabulate

    from a2rl.recording.diskuse import run_disk_use
    from a2rl.reporting.aggregate import foreign_note, untrusted_note
    from a2rl.scheduling.base import Schedulers
    from a2rl.scheduling.monitor import collect, jobs_alive, reap_lost
    from a2rl.store.results import load_result
    from a2rl.units import GIB

    sweep = open_sweep_dir(args.sweep_dir)
    schedulers = Schedulers()
    st = collect(sweep, schedulers)
    reap_lost(sweep, st)  # runs whose job is gone without a result end failed
    jobs = st.jobs
    table = []
    ledger = sweep.ledger
    foreign: dict[str, list[int]] = {}
    disk = 0
    for run in sweep.runs():
        result = load_result(sweep, run.run_id)
        status = sweep.status(run.run_id)
        state = result.status if result else (status.state if status else "not submitted")
        if not result and run.run_id in jobs and jobs[run.run_id].alive and status and status.stale():
            state = "waiting (scheduler)"
        entries = [] if result else ledger.entries(run.run_id)
        best = result.best if result else max((e.score for e in entries if e.score is not None), default=None)
        if seqs := result.foreign_submissions if result else [e.seq for e in entries if e.foreign]:
            foreign[run.run_id] = seqs
        reason = (
            (result.failure_reason or "").strip().splitlines()[-1][:100] if result and result.failure_reason else ""
        )
        job = jobs.get(run.run_id)
        tokens, cost = st.usage.get(run.run_id, (None, None))
        use = run_disk_use(sweep, run.run_id)
        disk += use.total
        table.append(
            [
                run.run_id,
                state,
                status.job_id if status else "",
                job.state if job else "",
                sweep.queue.count(run.run_id),
                ("" if best is None else f"{best:.2f}") + (" FOREIGN" if run.run_id in foreign else ""),
                "" if tokens is None else f"{tokens:,}",
                "" if cost is None else f"{cost:.2f}",
                f"{use.total / GIB:.2f} ({use.frozen_copies} frozen)",
                reason,
            ]
        )
    print(
        tabulate(
            table,
            headers=HEADERS,
            disable_numparse=True,
        )
    )
    print(f"disk: {disk / GIB:.2f} GiB kept by the runs in the sweep directory ({storage_line(sweep.spec)})")
    print(
        st.line(0).split("] ", 1)[1]
        + f" · {st.graders_alive} grader(s) alive"
        + f" · grader jobs {', '.join(jobs_alive(sweep.grader_jobs, schedulers)) or 'none'}"
    )
    for beat in sorted(st.graders, key=lambda b: b.holder):  # a failed reload cost a fresh engine: say so
        print(
            f"grader {beat.holder}: {beat.state}, {beat.graded} graded · {engine_line(beat, sweep.spec.grader.backend)}"
        )
    print_services(sweep, st, schedulers)
    for problem in st.problems:
        print(f"skipped: {problem}")
    if note := untrusted_note(sweep.spec.isolation == "none"):
        print(note.strip())
    if note := foreign_note(foreign):
        print(note.strip())
    return 0


def storage_line(spec) -> str:
    """The per-run storage budget in words, from the models' sizes (store/modeldirs.py: no weights loaded)."""
    from a2rl.spec.sizing import run_storage_gb
    from a2rl.store.modeldirs import planned_params

    budgets = {name: run_storage_gb(spec, n) for name, (n, _) in planned_params(spec).items()}
    per_model = ", ".join(f"{name} {gb:.2f} GiB" for name, gb in budgets.items()) or "model sizes unknown"
    return f"storage.run_gb per run: {per_model}; storage.keep: {spec.storage.keep}"


def print_services(sweep, st, schedulers) -> None:
    """The local drivers, the file-system verdict, and what a finished sweep left undone or retried."""
    from a2rl.drivers.endpoint import DriverEndpoint, endpoint_path, jobs_path
    from a2rl.scheduling.fscheck import FsVerdict, verdict_path
    from a2rl.scheduling.monitor import jobs_alive

    for name in sweep.spec.local_drivers:
        endpoint = DriverEndpoint.load_or_none(endpoint_path(sweep, name))
        state = (
            "no endpoint yet"
            if endpoint is None
            else f"{'serving' if endpoint.live() else endpoint.state + (': ' + endpoint.note if endpoint.note else '')}"
            f" {endpoint.model} at {endpoint.base_url}"
        )
        print(
            f"local driver {name}: {state} · jobs {', '.join(jobs_alive(jobs_path(sweep, name), schedulers)) or 'none'}"
        )
    if (fs := FsVerdict.load_or_none(verdict_path(sweep.root))) is not None:
        print(f"file system: {fs.line()}" + (f" · REFUSED: {fs.refused}" if fs.refused else ""))
    for line in (st.undone_line() if st.finished == st.total else "", st.retries_line()):
        if line:
            print(line)
