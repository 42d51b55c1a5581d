"""The real pool of grader jobs (scheduling/graders.py PoolOfJobs) on the fake scheduler of test_grader_replace.py:
it counts the sweep's grader jobs the scheduler has and the graders already serving (a fresh heartbeat), and
starts another only when none is still starting (queued or loading: help on its way) and fewer than max_workers
are alive. test_grader_autoscale.py runs it on Slurm (slow)."""

from __future__ import annotations

import a2rl.scheduling.graders as graders
from a2rl.scheduling.graders import PoolOfJobs
from a2rl.store.services import ServiceJobs, record_service_job
from test_grader_idle import auto_sweep, beat
from test_grader_replace import Cluster, schedulers


def test_the_pool_waits_for_a_starting_grader_and_stops_at_max_workers(tmp_path, tiny_model, monkeypatch):
    sweep, _ = auto_sweep(tmp_path, max_workers=3)
    cluster = Cluster()
    fake = schedulers(cluster)
    monkeypatch.setattr(graders, "Schedulers", lambda spec, folder: fake)
    pool = PoolOfJobs(str(sweep.root), "local", str(tmp_path / "jobs"))
    record_service_job(sweep.grader_jobs, "local", "1")
    cluster.alive["1"] = True
    assert pool.alive() == 1
    assert pool.start() is None and cluster.submitted == []  # job 1 has not served yet: it is on its way
    beat(sweep, "grader-0")
    assert pool.start() == "100" and len(cluster.submitted) == 1  # job 1 serves: another is started
    assert ServiceJobs.load(sweep.grader_jobs).job_ids == ["1", "100"] and pool.alive() == 2
    assert pool.start() is None and len(cluster.submitted) == 1  # job 100 is still starting
    beat(sweep, "grader-1")
    beat(sweep, "grader-2", state="exited")  # a grader that left serves no more
    beat(sweep, "grader-3", age=3600)  # nor does one whose heartbeat is stale
    assert pool.start() == "101" and pool.alive() == 3
    beat(sweep, "grader-4")
    assert pool.start() is None and len(cluster.submitted) == 2  # max_workers (3) alive, all serving
    cluster.alive["1"] = False  # one dies: room for another
    assert pool.alive() == 2 and pool.start() == "102"
