"""The `a2rl` command."""

from __future__ import annotations

import argparse
import http.client
import json
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path


def cmd_submit(args: argparse.Namespace) -> int:
    """Submit a model directory to this run's grader and print the /submit answer (blocks until scored)."""
    url = os.environ.get("GRADING_SERVER_URL")
    if not url:
        print("error: GRADING_SERVER_URL is not set (a2rl submit runs inside an agent's workspace)", file=sys.stderr)
        return 2
    path = Path(args.model_path)
    model_path = str(path.resolve()) if path.exists() else args.model_path  # else: relative to $WORKSPACE
    body, error = post_submit(f"{url}/submit", model_path, args.timeout)
    if body is not None:  # the server's answer, also when it reports an error: it may carry a submission id
        print(json.dumps(body, indent=1))
    if error:
        print(f"error: {' '.join(error.split())}", file=sys.stderr)  # one line, whatever the server sent
        return 1
    return 0


def post_submit(url: str, model_path: str, timeout_s: float) -> tuple[dict | None, str | None]:
    """(the server's JSON object or None, an error message or None). Every failure of the server or the
    connection is an error message here, never an exception: an agent reads one line, not a traceback."""
    headers = {"Content-Type": "application/json",
               "Authorization": f"Bearer {os.environ.get('GRADING_TOKEN', '')}"}  # the run's credential
    req = urllib.request.Request(url, data=json.dumps({"model_path": model_path}).encode(), headers=headers,
                                 method="POST")
    status = 200
    try:
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as e:
            status, raw = e.code, e.read()
    except urllib.error.URLError as e:
        return None, f"cannot reach the grading server at {url}: {e.reason}"
    except TimeoutError:
        return None, f"the grading server at {url} did not answer within {timeout_s:g} s"
    except (OSError, http.client.HTTPException) as e:  # reset, closed without an answer, truncated body
        return None, f"the grading server at {url} broke off the answer: {e!r}"
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    if not isinstance(body, dict):
        return None, f"the grading server answered HTTP {status} without a JSON object: {raw[:200]!r}"
    if body.get("error"):
        return body, str(body["error"]) + ("" if status == 200 else f" (HTTP {status})")
    if status != 200:
        return body, f"the grading server answered HTTP {status}"
    return body, None


class NotASweep(Exception):
    pass


def open_sweep_dir(path: Path):
    """The sweep directory at `path`, or NotASweep (printed as one line, exit 2, by main)."""
    from a2rl.store.sweepdir import SweepDir

    sweep = SweepDir(path)
    if not sweep.exists():
        raise NotASweep(f"{path} is not a sweep directory (no sweep.json)")
    return sweep


def cmd_grade(args: argparse.Namespace) -> int:
    """Run a grading daemon for a sweep in the foreground."""
    from a2rl.grading.daemon import run_grader

    return run_grader(str(open_sweep_dir(args.sweep_dir).root), args.index)


def cmd_runreport(args: argparse.Namespace) -> int:
    """Rebuild run reports (runs/<id>/report/) from the sweep directory."""
    from a2rl.reporting.runreport import write_run_report

    sweep = open_sweep_dir(args.sweep_dir)
    known = {r.run_id for r in sweep.runs()}
    if unknown := [r for r in args.run_ids if r not in known]:
        raise NotASweep(f"no run {', '.join(map(repr, unknown))} in {sweep.root}")
    ids = args.run_ids or [r for r in sorted(known) if sweep.result_path(r).exists()]
    for run_id in ids:
        print(write_run_report(sweep, run_id))
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    """Measure evaluation noise: grade the baseline (and --best submissions) K times per judge task."""
    from a2rl.grading.calibrate import calibrate

    sweep = open_sweep_dir(args.sweep_dir)
    if args.repeats < 2:
        raise NotASweep(f"--repeats must be 2 or more to measure noise, got {args.repeats}")
    tasks = args.tasks.split(",") if args.tasks else None
    if unknown := sorted(set(tasks or ()) - set(sweep.spec.tasks)):
        raise NotASweep(f"no task {', '.join(map(repr, unknown))} in {sweep.root}")
    calibrate(sweep, args.repeats, tasks=tasks, best=args.best)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    """Write a static HTML report of one or several sweeps (tables, plots, links to each run's report)."""
    from a2rl.cli.aggregate import open_sweeps
    from a2rl.errors import SpecError
    from a2rl.reporting.html import write_report

    try:
        sw = open_sweeps(args.sweep_dirs)
    except SpecError as e:
        raise NotASweep("; ".join(e.lines)) from None
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise NotASweep("a2rl report draws its plots with matplotlib: pip install 'a2rl[report]'") from None
    print(write_report(sw, args.out or sw.dirs[0].root / "report"))
    for problem in sw.problems:
        print(f"skipped: {problem}", file=sys.stderr)
    return 0


def cmd_prepare(args: argparse.Namespace) -> int:
    """Prepare a task's data (train split for agents, held-out split for the grader)."""
    from a2rl.errors import SpecError
    from a2rl.spec.models import default_data_root
    from a2rl.spec.tasks import get_task

    root = args.data_root or default_data_root()
    try:
        data = get_task(args.task).ensure_prepared(root, allow_network=True, source=args.source)
    except SpecError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{args.task}: train {data.train_dir}, held-out {data.heldout_dir}")
    return 0


def cmd_audit(args: argparse.Namespace) -> int:
    """Probe what the sweep's agents can reach, started as a run starts them; exit 1 when held-out data is."""
    from a2rl.errors import SpecError
    from a2rl.run.audit import AuditError, audit_path, run_audit
    from a2rl.run.sandbox import SandboxError
    from a2rl.scheduling.launcher import open_sweep

    try:
        sweep, _ = open_sweep(args.target, args.sweep_dir)
        record = run_audit(sweep)
    except (SpecError, SandboxError, AuditError) as e:
        for line in getattr(e, "lines", [str(e)]):
            print(f"error: {line}", file=sys.stderr)
        return 2
    print(record.table())
    print(f"isolation: {record.isolation} ({record.reason}); network: {record.network}; recorded in "
          f"{audit_path(sweep)}")
    if record.leaks:
        print(f"{len(record.leaks)} path(s) to held-out data", file=sys.stderr)
        return 1
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    """One line per run: state (from the run's own files, checked against the scheduler), job, best score, tokens
    and cost so far (where the agent's transcript reports them)."""
    from tabulate import tabulate

    from a2rl.drivers.endpoint import DriverEndpoint, endpoint_path, jobs_path
    from a2rl.scheduling.base import Schedulers
    from a2rl.reporting.aggregate import untrusted_note
    from a2rl.scheduling.monitor import collect, jobs_alive, reap_lost
    from a2rl.store.results import load_result

    sweep = open_sweep_dir(args.sweep_dir)
    schedulers = Schedulers()
    st = collect(sweep, schedulers)
    reap_lost(sweep, st)  # runs whose job is gone without a result end failed
    jobs = st.jobs
    table = []
    ledger = sweep.ledger
    for run in sweep.runs():
        result = load_result(sweep, run.run_id)
        status = sweep.status(run.run_id)
        state = result.status if result else (status.state if status else "not submitted")
        if not result and run.run_id in jobs and jobs[run.run_id].alive and status and status.stale():
            state = "waiting (scheduler)"
        best = result.best if result else max((e.score for e in ledger.entries(run.run_id)
                                               if e.score is not None), default=None)
        reason = (result.failure_reason or "").strip().splitlines()[-1][:100] if result and result.failure_reason else ""
        job = jobs.get(run.run_id)
        tokens, cost = st.usage.get(run.run_id, (None, None))
        table.append([run.run_id, state, status.job_id if status else "", job.state if job else "",
                      sweep.queue.count(run.run_id), "" if best is None else f"{best:.2f}",
                      "" if tokens is None else f"{tokens:,}", "" if cost is None else f"{cost:.2f}", reason])
    print(tabulate(table, headers=["run", "state", "job", "scheduler", "submissions", "best", "tokens", "cost $",
                                   "reason"], disable_numparse=True))
    print(st.line(0).split("] ", 1)[1] + f" · {st.graders_alive} grader(s) alive"
          + f" · grader jobs {', '.join(jobs_alive(sweep.grader_jobs, schedulers)) or 'none'}")
    for beat in sorted(st.graders, key=lambda b: b.holder):  # a failed reload cost a fresh engine: say so
        print(f"grader {beat.holder}: {beat.state}, {beat.graded} graded · engine {beat.starts} started, "
              f"{beat.reloads} reloaded, {beat.reload_failures} reload failure(s)")
    for name in sweep.spec.local_drivers:
        endpoint = DriverEndpoint.load_or_none(endpoint_path(sweep, name))
        state = "no endpoint yet" if endpoint is None else \
            f"{'serving' if endpoint.live() else endpoint.state + (': ' + endpoint.note if endpoint.note else '')}" \
            f" {endpoint.model} at {endpoint.base_url}"
        print(f"local driver {name}: {state} · jobs {', '.join(jobs_alive(jobs_path(sweep, name), schedulers)) or 'none'}")
    for problem in st.problems:
        print(f"skipped: {problem}")
    if note := untrusted_note(sweep.spec.isolation == "none"):
        print(note.strip())
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    """Cancel a sweep's unfinished runs (or one run) and, for a whole sweep, its graders and driver servers."""
    from a2rl.scheduling.base import Schedulers
    from a2rl.scheduling.monitor import collect, reap_lost
    from a2rl.store.results import mark_lost
    from a2rl.store.services import service_jobs
    from a2rl.records import atomic_write_text

    sweep = open_sweep_dir(args.sweep_dir)
    runs = [r for r in sweep.runs() if args.run in (None, r.run_id)]
    if not runs:
        print(f"error: no run {args.run!r} in {sweep.root}", file=sys.stderr)
        return 2
    by_kind: dict[str, list[str]] = {}
    deferred = 0
    for run in runs:
        status = sweep.status(run.run_id)
        if sweep.result_path(run.run_id).exists() or status is None:
            continue
        if status.state == "deferred":  # never submitted: no job to cancel, and no top-up may submit it now
            atomic_write_text(sweep.run_dir(run.run_id) / "cancelled", "")
            mark_lost(sweep, run, "deferred, never submitted")
            deferred += 1
        elif status.job_id is not None:
            atomic_write_text(sweep.run_dir(run.run_id) / "cancelled", "")
            by_kind.setdefault(status.executor or "local", []).append(status.job_id)
    for service in service_jobs(sweep) if args.run is None else []:
        by_kind.setdefault(service.executor, []).extend(service.job_ids)
    schedulers = Schedulers()
    for kind, ids in by_kind.items():
        schedulers[kind].cancel(ids)
        print(f"cancelled {len(ids)} {kind} job(s): {' '.join(ids)}")
    if deferred:
        print(f"cancelled {deferred} deferred run(s)")
    reap_lost(sweep, collect(sweep, schedulers))
    return 0


def main(argv: list[str] | None = None) -> int:
    from a2rl.cli import fetch
    from a2rl.spec import tinymodel

    p = argparse.ArgumentParser(prog="a2rl")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("submit", help=cmd_submit.__doc__)
    s.add_argument("model_path")
    s.add_argument("--timeout", type=float, default=7 * 3600,
                   help="seconds without an answer before giving up (default 7 h: above the grader's 6 h wait)")
    s.set_defaults(fn=cmd_submit)
    s = sub.add_parser("grade", help=cmd_grade.__doc__)
    s.add_argument("sweep_dir", type=Path)
    s.add_argument("--index", type=int, default=0)
    s.set_defaults(fn=cmd_grade)
    s = sub.add_parser("prepare", help=cmd_prepare.__doc__)
    s.add_argument("task")
    s.add_argument("--data-root", type=Path)
    s.add_argument("--source", type=Path, help="read the upstream files from this directory instead of downloading")
    s.set_defaults(fn=cmd_prepare)
    s = sub.add_parser("audit", help=cmd_audit.__doc__)
    s.add_argument("target", type=Path, help="sweep.yaml, or a sweep directory")
    s.add_argument("--sweep-dir", type=Path, help="where the sweep's records go (as for launch)")
    s.set_defaults(fn=cmd_audit)
    s = sub.add_parser("status", help=cmd_status.__doc__)
    s.add_argument("sweep_dir", type=Path)
    s.set_defaults(fn=cmd_status)
    s = sub.add_parser("cancel", help=cmd_cancel.__doc__)
    s.add_argument("sweep_dir", type=Path)
    s.add_argument("--run", help="only this run id")
    s.set_defaults(fn=cmd_cancel)
    s = sub.add_parser("runreport", help=cmd_runreport.__doc__)
    s.add_argument("sweep_dir", type=Path)
    s.add_argument("run_ids", nargs="*", help="default: every run with a result")
    s.set_defaults(fn=cmd_runreport)
    s = sub.add_parser("fetch-model", help="download a hub model's safetensors onto the shared file system")
    fetch.add_arguments(s)
    s.set_defaults(fn=fetch.run)
    s = sub.add_parser("calibrate", help=cmd_calibrate.__doc__)
    s.add_argument("sweep_dir", type=Path)
    s.add_argument("--repeats", type=int, default=5, help="gradings of each set of weights (default 5)")
    s.add_argument("--tasks", help="comma-separated tasks to calibrate (default: the judge tasks)")
    s.add_argument("--best", action="store_true", help="also re-grade each run's best submission (kept weights)")
    s.set_defaults(fn=cmd_calibrate)
    s = sub.add_parser("report", help=cmd_report.__doc__)
    s.add_argument("sweep_dirs", type=Path, nargs="+", metavar="SWEEP_DIR")
    s.add_argument("--out", type=Path, help="directory for index.html and its plots (default: FIRST_SWEEP_DIR/report)")
    s.set_defaults(fn=cmd_report)
    s = sub.add_parser("build-tiny-model", help="build the tiny offline test model")
    tinymodel.add_arguments(s)
    s.set_defaults(fn=tinymodel.run)
    s = sub.add_parser("launch", help="launch a sweep (same as python -m a2rl.launch)", add_help=False)
    s.set_defaults(fn=None)
    s = sub.add_parser("aggregate", help="results tables (same as python -m a2rl.aggregate)", add_help=False)
    s.set_defaults(fn=None)
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("launch", "aggregate"):
        import importlib

        return importlib.import_module(f"a2rl.{argv[0]}").main(argv[1:])
    args = p.parse_args(argv)
    try:
        return args.fn(args)
    except NotASweep as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
