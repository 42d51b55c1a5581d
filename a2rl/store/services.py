"""`graders/jobs.json`, `drivers/<name>/jobs.json` and `topup/jobs.json`: the jobs submitted for a sweep's
services (graders, local driver servers, the top-up job that watches the sweep), so status and cancel find them.
Written by whoever submits one: the launcher, and for graders also the graders (workers auto) and the watchers
that replace a dead one."""

from __future__ import annotations

from pathlib import Path

from a2rl.records import Record
from a2rl.store.locks import sweep_lock
from a2rl.store.sweepdir import SweepDir


class ServiceJobs(Record):
    """Jobs submitted for a sweep's services (graders, local driver servers, top-up), so status and cancel find
    them."""

    executor: str
    job_ids: list[str]


def record_service_job(path: Path, kind: str, job_id: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with sweep_lock(str(path) + ".lock"):
        rec = ServiceJobs.load_or_none(path) or ServiceJobs(executor=kind, job_ids=[])
        ServiceJobs(executor=kind, job_ids=[*rec.job_ids, job_id]).dump(path)


def service_jobs(sweep: SweepDir) -> list[ServiceJobs]:
    """Every service's job record: the graders', each local driver's and the top-up's."""
    paths = [sweep.grader_jobs, *sorted(sweep.drivers.glob("*/jobs.json")), sweep.topup_jobs]
    return [rec for p in paths if (rec := ServiceJobs.load_or_none(p)) is not None]
