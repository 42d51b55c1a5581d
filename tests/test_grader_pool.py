"""The real pool of grader jobs (scheduling/graders.py PoolOfJobs) on the fake scheduler of test_grader_replace.py:
it counts the sweep's grader jobs the scheduler has and the graders already serving (a fresh heartbeat), and
starts another only when none is still starting (queued or loading: help on its way) and fewer than max_workers
are alive. test_grader_autoscale.py runs it on Slurm (slow)."""

from __future__ import annotations

import sys

import pytest
from filelock import FileLock, Timeout

import a2rl.scheduling.graders as graders
from a2rl.reporting.runreport import rebuild_run_report
from a2rl.scheduling.base import Shape
from a2rl.scheduling.graders import PoolOfJobs, replace_dead_grader, submit_grader
from a2rl.scheduling.monitor import collect
from a2rl.spec.sizing import grader_mem_gb
from a2rl.store.services import ServiceJobs, record_service_job
from test_grader_idle import IDLE_S, auto_sweep, beat
from test_grader_replace import Cluster, FakeScheduler, schedulers, sweep_with_dead_grader


class ShapeRecorder(FakeScheduler):
    """The fake scheduler, also keeping the shape of each job it is given."""

    def __init__(self, cluster: Cluster, folder):
        super().__init__(cluster)
        self.folder, self.shapes = folder, []

    def submit(self, shape, fn, args):
        self.shapes.append(shape)
        return super().submit(shape, fn, args)


def pool_of(sweep, tmp_path, monkeypatch, cluster: Cluster) -> PoolOfJobs:
    """The sweep's real pool, its scheduler queries answered by the fake (asked with the sweep's spec and folder)."""
    fake = schedulers(cluster)

    def made(spec, folder):
        assert (spec, folder) == (sweep.spec, tmp_path / "jobs"), "the pool's scheduler is made for its sweep"
        return fake

    monkeypatch.setattr(graders, "Schedulers", made)
    return PoolOfJobs(str(sweep.root), "local", str(tmp_path / "jobs"))


def test_the_pool_waits_for_a_starting_grader_and_stops_at_max_workers(tmp_path, tiny_model, monkeypatch):
    sweep, _ = auto_sweep(tmp_path, max_workers=3)
    cluster = Cluster()
    pool = pool_of(sweep, tmp_path, monkeypatch, cluster)
    record_service_job(sweep.grader_jobs, "local", "1")
    cluster.alive["1"] = True
    assert pool.alive() == 1
    assert pool.start() is None and cluster.submitted == []  # job 1 has not served yet: it is on its way
    beat(sweep, "grader-0")
    assert pool.start() == "100" and len(cluster.submitted) == 1  # job 1 serves: another is started
    assert cluster.submitted[0].index == 1  # the second grader of the sweep
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


def test_the_pool_starts_under_the_graders_lock(tmp_path, tiny_model, monkeypatch):
    """The lock replace_dead_grader takes too: a pool that cannot take it in lock_timeout_s starts nothing."""
    sweep, _ = auto_sweep(tmp_path, lock_timeout_s=0.2)
    cluster = Cluster()
    pool = pool_of(sweep, tmp_path, monkeypatch, cluster)
    with FileLock(str(sweep.graders / "scale.lock")):
        with pytest.raises(Timeout):
            pool.start()
    assert cluster.submitted == [] and pool.start() == "100"


def test_a_grader_job_gets_its_shape_its_sweep_and_with_workers_auto_the_pool(tmp_path, tiny_model):
    sweep, _ = auto_sweep(tmp_path, python=sys.executable, mem_gb=12, cpus=3)
    cluster = Cluster()
    scheduler = ShapeRecorder(cluster, tmp_path / "jobs")
    assert submit_grader(sweep, scheduler, 2) == "100"
    spec = sweep.spec
    assert scheduler.shapes == [
        Shape(f"a2rl-grader-{spec.name}", spec.resources.job_time_s(spec.budget) + IDLE_S, 3, 0, 12, sys.executable)
    ]
    (job,) = cluster.submitted
    assert (job.sweep_dir, job.index, job.on_result) == (str(sweep.root), 2, rebuild_run_report)
    assert (job.pool.sweep_dir, job.pool.kind, job.pool.folder) == (str(sweep.root), "local", str(tmp_path / "jobs"))
    assert ServiceJobs.load(sweep.grader_jobs).job_ids == ["100"]
    # a fixed number of workers: no pool
    (tmp_path / "fixed").mkdir()
    fixed, _ = auto_sweep(tmp_path / "fixed", workers=2)
    other = ShapeRecorder(cluster, tmp_path / "jobs")
    submit_grader(fixed, other, 0, params={"big": 20_000_000_000})  # the launcher counted the models' parameters
    assert cluster.submitted[1].pool is None and other.shapes[0].python is None  # the launcher's interpreter
    assert other.shapes[0].mem_gb == grader_mem_gb(fixed.spec, {"big": 20_000_000_000}) > 8  # from those counts


def test_a_dead_grader_is_replaced_by_the_sweeps_first_grader_under_the_graders_lock(tmp_path, tiny_model):
    sweep, _, cluster = sweep_with_dead_grader(tmp_path)
    s = schedulers(cluster)
    assert replace_dead_grader(sweep, s, "local", collect(sweep, s)) == "100"
    (job,) = cluster.submitted
    assert (job.sweep_dir, job.index) == (str(sweep.root), 0)
    (tmp_path / "locked").mkdir()
    locked, _ = auto_sweep(tmp_path / "locked", lock_timeout_s=0.2)  # no grader job, work to do
    s = schedulers(Cluster())
    with FileLock(str(locked.graders / "scale.lock")):
        with pytest.raises(Timeout):
            replace_dead_grader(locked, s, "local", collect(locked, s))
