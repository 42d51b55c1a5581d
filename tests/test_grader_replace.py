"""A dead last grader (killed, its node lost) is replaced by whoever watches the sweep, the follower or the top-up
job, while work remains: exactly one new grader job even when both look at once (the graders' lock); none while
a grader job lives, the scheduler cannot tell, or the sweep is done. A fake scheduler stands in for Slurm here;
the real replacement runs in test_grader_replace_slurm below."""

from __future__ import annotations

import socket
import subprocess
import threading
import time

import pytest

from a2rl.grading.daemon import GraderJob
from a2rl.records import now
from a2rl.scheduling.base import JobState, Scheduler, Schedulers
from a2rl.scheduling.graders import replace_dead_grader, submit_grader
from a2rl.scheduling.launcher import Launcher, TopUpJob, open_sweep, run_job
from a2rl.scheduling.monitor import collect
from a2rl.store.results import mark_lost
from a2rl.store.services import record_service_job
from a2rl.store.sweepdir import STALE_S, RunStatus
from conftest import slurm_available, until, write_sweep


class Cluster:
    """STAND-IN for the scheduler's own state, shared by every FakeScheduler (one per watcher process): job id
    -> alive (None: cannot tell), and what was submitted, in order."""

    def __init__(self):
        self.alive: dict[str, bool | None] = {}
        self.submitted: list[object] = []
        self.lock = threading.Lock()


class FakeScheduler(Scheduler):
    kind = "local"

    def __init__(self, cluster: Cluster, submit_s: float = 0.0):
        super().__init__()
        self.cluster, self.submit_s = cluster, submit_s

    def submit(self, shape, fn, args):
        time.sleep(self.submit_s)  # sbatch takes a moment: long enough for a second watcher to look too
        ids = []
        with self.cluster.lock:
            for _ in args:
                job_id = str(100 + len(self.cluster.submitted))
                self.cluster.submitted.append(fn)
                self.cluster.alive[job_id] = True
                ids.append(job_id)
        return ids

    def states(self, job_ids):
        return {j: self.state(self.cluster.alive.get(j, False)) for j in job_ids}

    @staticmethod
    def state(alive: bool | None) -> JobState:
        return JobState(alive, "killed (fake)", "FAILED") if alive is False else JobState(alive, state="FAKE")

    def cancel(self, job_ids):
        pass


def schedulers(cluster: Cluster, submit_s: float = 0.0) -> Schedulers:
    s = Schedulers()
    s["local"] = FakeScheduler(cluster, submit_s)
    return s


def sweep_with_dead_grader(tmp_path, state: str = "running", seeds=(0,)):
    sweep, runs = open_sweep(write_sweep(tmp_path, seeds=list(seeds)), tmp_path / "sd")
    for run in runs:
        RunStatus(run_id=run.run_id, state=state, job_id=f"r{run.run_id}", executor="local", heartbeat_at=now()).dump(
            sweep.run_dir(run.run_id) / "status.json"
        )
    record_service_job(sweep.grader_jobs, "local", "1")  # killed: the scheduler no longer has it
    cluster = Cluster()
    cluster.alive.update({"1": False, **{f"r{r.run_id}": True for r in runs}})
    return sweep, runs, cluster


def grader_ids(sweep) -> list[str]:
    import json

    return json.loads(sweep.grader_jobs.read_text())["job_ids"]


def two_watchers_at_once(sweep, backend: str, make_schedulers) -> list[str | None]:
    """What replace_dead_grader returns to two watchers (the follower and the top-up job) looking at once."""
    started: list[str | None] = []

    def watch():
        s = make_schedulers()
        started.append(replace_dead_grader(sweep, s, backend, collect(sweep, s)))

    watchers = [threading.Thread(target=watch) for _ in range(2)]
    for w in watchers:
        w.start()
    for w in watchers:
        w.join()
    return started


def test_two_watchers_looking_at_once_start_exactly_one_grader(tmp_path, tiny_model):
    sweep, _, cluster = sweep_with_dead_grader(tmp_path)
    started = two_watchers_at_once(sweep, "local", lambda: schedulers(cluster, submit_s=0.3))
    assert sorted(started, key=str) == ["100", None]
    assert [type(f) for f in cluster.submitted] == [GraderJob]
    assert grader_ids(sweep) == ["1", "100"]
    # the new one lives: a later look starts none
    s = schedulers(cluster)
    assert replace_dead_grader(sweep, s, "local", collect(sweep, s)) is None


@pytest.mark.parametrize("alive", [True, None])
def test_no_grader_is_started_while_one_lives_or_the_scheduler_cannot_tell(tmp_path, tiny_model, alive):
    sweep, _, cluster = sweep_with_dead_grader(tmp_path)
    cluster.alive["1"] = alive
    s = schedulers(cluster)
    assert replace_dead_grader(sweep, s, "local", collect(sweep, s)) is None
    assert cluster.submitted == []


def test_a_pending_submission_is_work_even_when_every_run_has_its_result(tmp_path, tiny_model):
    sweep, (run,), cluster = sweep_with_dead_grader(tmp_path)
    s = schedulers(cluster)
    cluster.alive[f"r{run.run_id}"] = False  # its job ended: the top-up job reaps it (no result: lost)
    topup = TopUpJob(str(sweep.root), "local", str(tmp_path / "jobs"))
    sweep.queue.submit(run.run_id, "output/v0", lambda sid: None, "its wrap-up submission")
    assert topup.round(sweep, s) is False  # the run is marked lost, its submission still waits for a grader
    assert sweep.result_path(run.run_id).exists()
    assert [type(f) for f in cluster.submitted] == [GraderJob]
    sweep.queue.finish(sweep.queue.pending_ids()[0])
    assert topup.round(sweep, s) is True  # done: the top-up job ends
    assert len(cluster.submitted) == 1


def test_the_topup_job_submits_deferred_runs_and_replaces_the_grader(tmp_path, tiny_model):
    sweep, runs, cluster = sweep_with_dead_grader(tmp_path, state="deferred", seeds=(0, 1))
    s = schedulers(cluster)
    assert TopUpJob(str(sweep.root), "local", str(tmp_path / "jobs")).round(sweep, s) is False
    assert cluster.submitted[:2] == [run_job, run_job] and type(cluster.submitted[2]) is GraderJob
    assert {sweep.status(r.run_id).state for r in runs} == {"submitted"}


def test_a_finished_sweep_gets_no_grader(tmp_path, tiny_model):
    sweep, (run,), cluster = sweep_with_dead_grader(tmp_path)
    # its job died unseen (stale heartbeat, the scheduler cannot tell): reaped, and then nothing is left to grade
    host = socket.gethostname()  # this host's job: its stamp is judged on one clock
    RunStatus(run_id=run.run_id, state="running", executor="local", host=host, heartbeat_at=now() - 2 * STALE_S).dump(
        sweep.run_dir(run.run_id) / "status.json"
    )
    s = schedulers(cluster)
    assert TopUpJob(str(sweep.root), "local", str(tmp_path / "jobs")).round(sweep, s) is True
    assert cluster.submitted == []


def test_the_follower_replaces_a_dead_grader_while_it_follows(tmp_path, tiny_model, capsys):
    sweep, (run,), cluster = sweep_with_dead_grader(tmp_path)
    launcher = Launcher(sweep, "local", schedulers(cluster))

    def poll_later(_s):  # after the first poll the run's job dies: reaped, the sweep is done, the follower ends
        cluster.alive[f"r{run.run_id}"] = False

    assert launcher.follow(poll_s=0, sleep=poll_later) == 1  # the run failed (lost)
    assert [type(f) for f in cluster.submitted] == [GraderJob]
    assert "no grader was alive with work left: started grader job 100" in capsys.readouterr().out


def test_a_watched_launch_submits_one_topup_job_per_sweep(tmp_path, tiny_model):
    """`watch` (a Slurm sweep launched without --wait): the top-up job is submitted even where every run fits,
    and a relaunch submits no second one while it lives (nor after it if asked not to watch)."""
    sweep, runs = open_sweep(write_sweep(tmp_path, seeds=[0, 1]), tmp_path / "sd")
    cluster = Cluster()
    first = Launcher(sweep, "local", schedulers(cluster))
    first.submit(runs, watch=True)
    assert [type(f) for f in cluster.submitted[:2]] == [GraderJob, TopUpJob] and cluster.submitted[2:] == [run_job] * 2
    assert first.topup_jobs == ["101"] and first.deferred == []
    again = Launcher(sweep, "local", schedulers(cluster))
    again.submit([], watch=True)
    assert again.topup_jobs == [] and len(cluster.submitted) == 4  # the grader and the top-up job both live
    cluster.alive["101"] = False  # it ended (the sweep was done, or it was killed): a relaunch that watches starts one
    Launcher(sweep, "local", schedulers(cluster)).submit([], watch=False)
    assert len(cluster.submitted) == 4
    Launcher(sweep, "local", schedulers(cluster)).submit([], watch=True)
    assert type(cluster.submitted[4]) is TopUpJob and grader_ids(sweep) == ["100"]


def test_the_topup_job_ends_at_the_first_look_after_the_sweep_is_done(tmp_path, tiny_model, monkeypatch):
    """Between its rounds (every 30 s) the top-up job looks at the files every 5 s: it ends at the first look that
    finds every result written and nothing pending, not a round later."""
    sweep, runs = open_sweep(write_sweep(tmp_path, seeds=[0, 1]), tmp_path / "sd")
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        if len(slept) == 2:  # the runs end during the second look's wait (their results, as a lost run's)
            for run in runs:
                mark_lost(sweep, run, "ended (test)")

    monkeypatch.setattr(time, "sleep", sleep)
    assert TopUpJob(str(sweep.root), "local", str(tmp_path / "jobs"))() == 0
    assert slept == [5.0, 5.0]


@pytest.mark.slurm
@pytest.mark.skipif(not slurm_available(), reason="no Slurm cluster (tools/slurm/up.sh)")
def test_grader_replace_slurm(tmp_path, tiny_model):
    """On the local cluster: the sweep's grader job is cancelled (killed) while a run is queued; two watchers
    looking at once submit exactly one grader job, through sbatch. Every job is held (begin in an hour) so
    nothing runs."""
    spec = write_sweep(
        tmp_path,
        executor="slurm",
        cluster="local",
        resources={"mem_gb": 0.1, "sbatch": {"begin": "now+1hour"}},
        grader={"mem_gb": 1},
    )
    sweep, (run,) = open_sweep(spec, tmp_path / "sd")
    folder = tmp_path / "jobs"
    RunStatus(run_id=run.run_id, state="submitted", heartbeat_at=now()).dump(sweep.run_dir(run.run_id) / "status.json")
    first = submit_grader(sweep, Schedulers(sweep.spec, folder)["slurm"], 0)
    subprocess.run(["scancel", first], check=True, timeout=60)
    try:
        until(lambda: not squeue(first), 60, "the cancelled grader to leave the queue")
        # each its own cache, as the follower and the top-up job have
        started = two_watchers_at_once(sweep, "slurm", lambda: Schedulers(sweep.spec, folder))
        (new,) = [j for j in started if j is not None]
        assert started.count(None) == 1 and squeue(new) == [new]
        assert grader_ids(sweep) == [first, new]
    finally:
        ids = [j for j in grader_ids(sweep) if j]
        subprocess.run(["scancel", *ids], capture_output=True, timeout=60)


def squeue(job_id: str) -> list[str]:
    return subprocess.run(["squeue", "-h", "-o", "%i", "-j", job_id], capture_output=True, text=True).stdout.split()
