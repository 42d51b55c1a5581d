"""The scheduler interface: canned squeue/sacct/sacctmgr outputs through the Slurm scheduler's
command runner, a fake clock for its query interval, the sbatch script submitit would write, and cluster
profile checks; then the local scheduler for real (`a2rl cancel`, reap_lost, --retry-failed)."""

from __future__ import annotations

import contextlib
import getpass
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import yaml

from a2rl.records import now
from a2rl.scheduling.base import Schedulers, Shape, make_scheduler
from a2rl.scheduling.launcher import Launcher, open_sweep, pending_runs
from a2rl.scheduling.monitor import collect, reap_lost
from a2rl.scheduling.slurm import parse_assoc, parse_qos, parse_sacct, parse_squeue, parse_tres_gpus
from a2rl.store.results import RunResult, mark_lost
from a2rl.store.services import record_service_job
from a2rl.store.sweepdir import RunStatus, SweepDir
from conftest import a2rl, until, write_sweep
from fakes import FakeClock

USER = getpass.getuser()


class CannedSlurm:
    """Answers squeue/sacct/sacctmgr from `self.squeue` etc. (set by the test) and counts every call."""

    def __init__(self) -> None:
        self.squeue, self.sacct, self.assoc, self.qos, self.tres = "", "", "", "", ""
        self.config = "MaxArraySize             = 1001\n"  # scontrol show config
        self.sacctmgr_rc = 0
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str]) -> subprocess.CompletedProcess:
        self.calls.append(argv)
        out = {"squeue": self.squeue, "sacct": self.sacct, "scontrol": self.config}.get(argv[0])
        if argv[0] == "sacctmgr":
            out = self.assoc if argv[4] == "assoc" else self.tres if "GrpTRES" in argv[-1] else self.qos
            return subprocess.CompletedProcess(argv, self.sacctmgr_rc, out, "")
        if out is None:
            raise AssertionError(f"unexpected command {argv}")
        return subprocess.CompletedProcess(argv, 0, out, "")

    def count(self, cmd: str) -> int:
        return sum(1 for c in self.calls if c[0] == cmd)


def test_squeue_sacct_and_sacctmgr_outputs_parse():
    assert parse_squeue(
        "101_0|RUNNING|None|normal\n101_1|PENDING|BeginTime|normal\n\n102|PENDING|QOSMaxJobsPerUserLimit|long\n"
    ) == {
        "101_0": ("RUNNING", "None", "normal"),
        "101_1": ("PENDING", "BeginTime", "normal"),
        "102": ("PENDING", "QOSMaxJobsPerUserLimit", "long"),
    }
    assert parse_sacct("101_2|CANCELLED by 0|0:15\n101_3|COMPLETED|0:0\n103|RUNNING|0:0\n") == {
        "101_2": ("CANCELLED", "0:15"),
        "101_3": ("COMPLETED", "0:0"),
        "103": ("RUNNING", "0:0"),
    }
    # Account|DefaultQOS|MaxSubmit|MaxJobs|GrpSubmit: one user, two accounts
    assoc = "proj|long|200||\nother||50|40|\n"
    assert parse_assoc(assoc, None) == ([200, 50, 40], "long")
    assert parse_assoc(assoc, "other") == ([50, 40], None)
    assert parse_qos("a2rl-test-qos|20||\n") == [20]
    assert parse_qos("normal|||\n") == []
    # Name|GrpTRES|MaxTRESPU, as sacctmgr printed them on the test cluster
    assert parse_tres_gpus("a2rl-test-gpuqos|gres/gpu=1|cpu=8,gres/gpu=2\n") == {"GrpTRES": 1, "MaxTRESPerUser": 2}
    assert parse_tres_gpus("normal|||\n") == {}


def slurm(runner: CannedSlurm, clock: FakeClock, spec=None):
    return make_scheduler("slurm", spec, runner=runner, clock=clock, min_interval_s=30)


def test_states_come_from_squeue_then_sacct_and_are_asked_at_most_every_30_s():
    runner, clock = CannedSlurm(), FakeClock()
    s = slurm(runner, clock)
    runner.squeue = "7_0|PENDING|BeginTime\n7_1|RUNNING|None\n"
    runner.sacct = "7_2|CANCELLED by 0|0:15\n8|RUNNING|0:0\n"
    st = s.states(["7_0", "7_1", "7_2", "8", "9"])
    assert {k: (v.alive, v.state) for k, v in st.items()} == {
        "7_0": (True, "PENDING"),
        "7_1": (True, "RUNNING"),
        "7_2": (False, "CANCELLED"),
        "8": (True, "RUNNING"),
        "9": (False, "unknown"),
    }
    assert st["7_2"].reason == "Slurm state CANCELLED (exit code 0:15)"
    assert runner.calls[0] == ["squeue", "-h", "-r", "-u", USER, "-o", "%i|%T|%r|%q"]
    assert runner.calls[1][-2:] == ["-j", "7_2,8,9"]  # sacct only for what squeue no longer lists
    runner.squeue = ""  # everything ended; the cache answers until the interval is up
    for _ in range(14):
        clock.advance(2)
        assert s.states(["7_0", "7_1"])["7_0"].alive
    assert (runner.count("squeue"), runner.count("sacct")) == (1, 1)
    clock.advance(2)
    assert s.states(["7_0", "7_1"])["7_0"].alive is False
    assert (runner.count("squeue"), runner.count("sacct")) == (2, 2)
    s.states(["10"])  # a job id never seen is asked about at once
    assert runner.count("squeue") == 3


def fake_slurm_sweep(tmp_path: Path, n: int) -> SweepDir:
    """A sweep whose runs were submitted to Slurm as array 7 (the records a launch leaves), no cluster needed."""
    sweep, runs = open_sweep(write_sweep(tmp_path, seeds=list(range(n))), tmp_path / "sd")
    for i, run in enumerate(runs):
        RunStatus(run_id=run.run_id, state="submitted", job_id=f"7_{i}", executor="slurm", heartbeat_at=now()).dump(
            sweep.run_dir(run.run_id) / "status.json"
        )
    record_service_job(sweep.grader_jobs, "slurm", "6")
    return sweep


def test_a_follower_reads_files_every_2_s_but_asks_slurm_at_most_every_30_s(tmp_path):
    sweep = fake_slurm_sweep(tmp_path, 3)
    runner, clock = CannedSlurm(), FakeClock()
    start = clock.now
    runner.squeue = "6|RUNNING|None\n7_0|RUNNING|None\n7_1|RUNNING|None\n7_2|PENDING|Priority\n"
    ticks = []

    def sleep(s: float) -> None:
        ticks.append(s)
        clock.advance(s)
        if clock.now - start >= 100:  # the jobs end (without results: the follower reaps them as lost)
            runner.squeue = "6|RUNNING|None\n"
            runner.sacct = "7_0|COMPLETED|0:0\n7_1|COMPLETED|0:0\n7_2|FAILED|1:0\n"

    launcher = Launcher(
        sweep, "slurm", Schedulers(sweep.spec, tmp_path / "jobs", runner=runner, clock=clock, min_interval_s=30)
    )
    assert launcher.follow(poll_s=2.0, sleep=sleep) == 1  # every run lost → failed
    assert len(ticks) == 60 and set(ticks) == {2.0}  # files read every 2 s until the query at t=120 s
    assert runner.count("squeue") == 5  # t = 0, 30, 60, 90, 120 s
    assert runner.count("sacct") == 1
    assert "Slurm state FAILED" in (sweep.run_dir(sweep.runs()[2].run_id) / "result.json").read_text()


def test_relaunch_submits_no_run_whose_job_is_alive_whatever_its_status_says(tmp_path):
    sweep = fake_slurm_sweep(tmp_path, 5)
    runs = sweep.runs()
    for i, state in ((1, "interrupted"), (2, "running")):  # requeued; running but silent (stale heartbeat)
        RunStatus(
            run_id=runs[i].run_id, state=state, job_id=f"7_{i}", executor="slurm", heartbeat_at=now() - 3600
        ).dump(sweep.run_dir(runs[i].run_id) / "status.json")
    (sweep.run_dir(runs[4].run_id) / "status.json").unlink()  # never submitted
    runner = CannedSlurm()
    runner.squeue = "7_0|PENDING|BeginTime\n7_1|PENDING|BeginTime\n"
    runner.sacct = "7_2|RUNNING|0:0\n7_3|CANCELLED by 0|0:15\n"
    todo = pending_runs(sweep, runs, False, Schedulers(runner=runner, clock=FakeClock()))
    assert [r.run_id for r in todo] == [runs[3].run_id, runs[4].run_id]
    assert (runner.count("squeue"), runner.count("sacct")) == (1, 1)  # once for the whole sweep


def test_capacity_is_the_tightest_qos_or_association_limit_less_the_queued_jobs(tmp_path):
    sweep = fake_slurm_sweep(tmp_path, 1)
    spec = sweep.spec.model_copy(update={"resources": sweep.spec.resources.model_copy(update={"qos": "a2rl-test-qos"})})
    runner, clock = CannedSlurm(), FakeClock()
    runner.assoc = "root|normal|||\n"
    runner.qos = "a2rl-test-qos|20|40|\n"
    runner.squeue = "".join(f"5_{i}|PENDING|Priority|a2rl-test-qos\n" for i in range(15)) + "".join(
        f"4_{i}|PENDING|Priority|normal\n" for i in range(30)
    )  # other QOS: not under its limit
    s = slurm(runner, clock, spec)
    assert s.capacity() == 5
    assert s.limits() == ("a2rl-test-qos", 20, None)
    assert [
        "sacctmgr",
        "-n",
        "-P",
        "show",
        "qos",
        "where",
        "name=a2rl-test-qos",
        "format=Name,MaxSubmitPU,MaxJobsPU,GrpSubmit",
    ] in runner.calls
    runner.assoc = "root|normal|50||\n"  # the association's limit counts all the user's 45 jobs
    assert slurm(runner, clock, spec).capacity() == 5
    runner.assoc = "root|normal|48||\n"
    assert slurm(runner, clock, spec).capacity() == 3
    runner.assoc, runner.qos = "root||||\n", ""
    assert slurm(runner, clock, spec).capacity() is None  # no limit anywhere


def test_gres_gpu_asks_for_typed_gpus_as_gres(tmp_path, monkeypatch):
    (tmp_path / "clusters").mkdir()
    for name, extra in (("typed", {"gres_gpu": "gpu:a100"}), ("plain", {})):
        (tmp_path / "clusters" / f"{name}.yaml").write_text(yaml.safe_dump({"name": name, "partition": "p", **extra}))
    monkeypatch.setenv("A2RL_CLUSTERS_PATH", str(tmp_path / "clusters"))
    sweep, _ = open_sweep(write_sweep(tmp_path, executor="slurm", cluster="typed"), tmp_path / "sd")

    def script(spec, gpus: int) -> list[str]:
        ex = make_scheduler("slurm", spec, tmp_path / "jobs").executor(Shape("n", 600, 1, gpus, 1))
        return [
            line
            for line in ex._executor._make_submission_file_text("cmd", "u").splitlines()
            if line.startswith(("#SBATCH --gres", "#SBATCH --gpus"))
        ]

    assert script(sweep.spec, 2) == ["#SBATCH --gres=gpu:a100:2"]
    assert script(sweep.spec.model_copy(update={"cluster": "plain"}), 2) == ["#SBATCH --gpus-per-node=2"]


def test_an_unknown_key_in_a_cluster_profile_is_a_one_line_error(tmp_path, monkeypatch):
    (tmp_path / "clusters").mkdir()
    (tmp_path / "clusters" / "bad.yaml").write_text("name: bad\npartition: debug\ngpu_gres: gpu\n")
    monkeypatch.setenv("A2RL_CLUSTERS_PATH", str(tmp_path / "clusters"))
    spec = write_sweep(tmp_path, executor="slurm", cluster="bad")
    proc = subprocess.run(
        [sys.executable, "-m", "a2rl", "launch", str(spec), "--dry-run"], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert (
        proc.stderr.strip().endswith("bad.yaml: gpu_gres: unknown key (did you mean 'gres_gpu'?)")
        and "Traceback" not in proc.stderr
    )


# ------------------------------------------------------------------ the local scheduler, for real
def started_sleeper(tmp_path: Path) -> tuple[SweepDir, str]:
    spec = write_sweep(tmp_path, agents=["sleeper"], budget=600)
    a2rl("launch", str(spec), "--sweep-dir", str(tmp_path / "sd"), check=True)
    sweep = SweepDir(tmp_path / "sd")
    (run,) = sweep.runs()
    until(lambda: (s := sweep.status(run.run_id)) and s.state == "running", 300, "running run")
    return sweep, run.run_id


@pytest.mark.slow
def test_a2rl_cancel_on_the_local_executor_stops_the_job_and_fails_the_run(tmp_path):
    sweep, run_id = started_sleeper(tmp_path)
    controller = int(sweep.status(run_id).job_id)
    proc = a2rl("cancel", str(sweep.root), check=True)
    assert f"cancelled 2 local job(s): {controller} " in proc.stdout  # the run's and the grader's
    until(lambda: not psutil.pid_exists(controller), 300, "exit of the job's controller")
    until(lambda: "failed" in a2rl("status", str(sweep.root), check=True).stdout, 300, "failed run in a2rl status")
    result = RunResult.load(sweep.result_path(run_id))
    assert result.status == "failed" and "cancelled by `a2rl cancel`" in result.failure_reason


@pytest.mark.slow
def test_a_killed_local_run_gets_its_failed_result_only_from_reap_lost(tmp_path):
    sweep, run_id = started_sleeper(tmp_path)
    controller = psutil.Process(int(sweep.status(run_id).job_id))
    doomed = [controller, *controller.children(recursive=True)]
    for p in doomed:  # the job's whole tree, as when its machine's OOM killer strikes (no result written)
        with contextlib.suppress(psutil.NoSuchProcess):  # a child may end between listing and killing
            p.kill()
    psutil.wait_procs(doomed)
    st = collect(sweep, Schedulers())
    assert run_id in st.lost and "has exited" in st.lost[run_id]
    assert not sweep.result_path(run_id).exists()  # collect only reads
    (reaped,) = reap_lost(sweep, st)
    assert reaped.status == "failed" and RunResult.load(sweep.result_path(run_id)).status == "failed"
    a2rl("cancel", str(sweep.root), check=True)  # the grader


@pytest.mark.slow
def test_retry_failed_resubmits_only_failed_runs(tmp_path):
    sweep, runs = open_sweep(write_sweep(tmp_path, seeds=[0, 1]), tmp_path / "sd")
    mark_lost(sweep, runs[0], "lost in a test")
    proc = a2rl("launch", str(sweep.root), "--wait")
    assert proc.returncode == 1 and "submitted 1 of 2 runs" in proc.stdout, proc.stdout  # 1 failed
    assert "nothing to submit" in a2rl("launch", str(sweep.root)).stdout  # a failed run has finished
    proc = a2rl("launch", str(sweep.root), "--retry-failed", "--wait", check=True)
    assert "submitted 1 of 2 runs" in proc.stdout, proc.stdout
    assert [RunResult.load(sweep.result_path(r.run_id)).status for r in runs] == ["ok", "ok"]
    (old,) = sweep.run_dir(runs[0].run_id).glob("result.failed-*.json")
    assert RunResult.load(old).failure_reason == "lost in a test"


def test_a_relaunched_interrupted_run_keeps_its_attempts_and_used_budget(tmp_path):
    """Relaunching (not a scheduler requeue) must not hand an interrupted run a fresh budget."""
    from a2rl.scheduling.base import Scheduler
    from a2rl.scheduling.launcher import submit_runs

    class Accepting(Scheduler):
        kind = "local"

        def submit(self, shape, fn, args):
            return [str(100 + i) for i in range(len(args))]

        def states(self, job_ids):
            return {}

        def cancel(self, job_ids):
            pass

    sweep = fake_slurm_sweep(tmp_path, 2)
    resumed, fresh = sweep.runs()
    RunStatus(
        run_id=resumed.run_id,
        state="interrupted",
        job_id="7_0",
        executor="slurm",
        attempt=2,
        agent_seconds=41.5,
        setup_seconds=[3.0, 2.0],
        heartbeat_at=now(),
    ).dump(sweep.run_dir(resumed.run_id) / "status.json")
    assert submit_runs(sweep, Accepting(), [resumed, fresh]) == ["100", "101"]
    st = sweep.status(resumed.run_id)
    assert (st.state, st.job_id, st.attempt, st.agent_seconds, st.setup_seconds) == (
        "submitted",
        "100",
        2,
        41.5,
        [3.0, 2.0],
    )
    assert (sweep.status(fresh.run_id).attempt, sweep.status(fresh.run_id).agent_seconds) == (0, 0.0)


def test_past_the_queue_limit_a_topup_job_takes_its_place_before_the_runs(tmp_path):
    """Runs beyond the queue limit are deferred, and the job that submits them when nobody follows is queued
    first (after the grader), so it is never itself the one left out; a relaunch while it lives adds none."""
    from a2rl.grading.daemon import GraderJob
    from a2rl.scheduling.base import JobState, Scheduler
    from a2rl.scheduling.launcher import TopUpJob, run_job

    class Limited(Scheduler):
        kind = "local"

        def __init__(self, room: int):
            super().__init__()
            self.room, self.jobs = room, []

        def capacity(self):
            return self.room

        def submit(self, shape, fn, args):
            n = min(self.room, len(args))
            self.room -= n
            self.jobs += [fn] * n
            return [str(len(self.jobs) - n + i) for i in range(n)]

        def states(self, job_ids):
            return {j: JobState(True, None, "RUNNING") for j in job_ids}

        def cancel(self, job_ids):
            pass

    sweep, runs = open_sweep(write_sweep(tmp_path, seeds=list(range(5))), tmp_path / "sd")
    scheduler = Limited(4)
    launcher = Launcher(sweep, "local", Schedulers())
    launcher.schedulers["local"] = launcher.scheduler = scheduler
    launcher.submit(runs)
    assert [type(j) for j in scheduler.jobs[:2]] == [GraderJob, TopUpJob] and scheduler.jobs[2:] == [run_job] * 2
    assert len(launcher.deferred) == 3 and launcher.topup_jobs == ["1"]
    assert [sweep.status(r.run_id).state for r in runs] == ["submitted"] * 2 + ["deferred"] * 3

    scheduler.room = 2
    again = Launcher(sweep, "local", Schedulers())
    again.schedulers["local"] = again.scheduler = scheduler
    again.submit(runs[2:])
    assert again.topup_jobs == [] and again.grader_jobs == []  # both still alive


@pytest.mark.parametrize("kind", ["local", "slurm"])
def test_a_job_runs_in_the_interpreter_its_shape_names(tmp_path, kind):
    """grader.python / the vLLM environment (spec/sweep.py grader_python) reach submitit's command line."""
    sweep, _ = open_sweep(write_sweep(tmp_path, executor=kind), tmp_path / "sd")
    scheduler = make_scheduler(kind, sweep.spec, tmp_path / "jobs")
    own = scheduler.executor(Shape("n", 600, 1, 0, 1))._executor._submitit_command_str
    named = scheduler.executor(Shape("n", 600, 1, 0, 1, "/opt/v env/bin/python"))._executor._submitit_command_str
    assert own.startswith(sys.executable) and named.startswith("'/opt/v env/bin/python' -u -m submitit")


def test_the_capacity_plan_counts_hours_arrays_jobs_and_the_queue_limit(tmp_path):
    from a2rl.scheduling import capacity
    from a2rl.spec.tasks import get_task
    from a2rl.tasklib.prepare import ensure_prepared

    spec_path = write_sweep(
        tmp_path,
        seeds=list(range(5)),
        budget="1h",
        data_root=str(tmp_path / "data"),
        resources={"gpus": 2, "cpus": 8, "setup_margin_s": 1800, "qos": "a2rl-test-qos"},
        grader={"gpus": 1, "workers": "auto", "max_workers": 3, "idle_timeout_s": 1800},
    )
    sweep, runs = open_sweep(spec_path, tmp_path / "sd")
    spec, runner = sweep.spec, CannedSlurm()
    runner.config = "MaxArraySize             = 2\n"
    runner.assoc, runner.qos = "root|normal|||\n", "a2rl-test-qos|20||\n"
    params = {"tiny-llama": 2_000_000_000}
    lines = capacity.plan(spec, runs, params, slurm(runner, FakeClock(), spec), 10)
    # 5 runs x 1.5 h x 2 GPUs, 8 CPUs; graders: up to 3 x (1.5 h + 0.5 h) x 1 GPU
    assert (
        lines[0]
        == "runs: 5 jobs x 1h30m (budget 1h00m + set-up margin 30m) x 2 GPU, 8 CPU: 15.0 GPU-hours, 60.0 CPU-hours"
    )
    assert lines[1].endswith("unknown (task echo is not prepared (no heldout_size))")
    assert lines[2].startswith("grader jobs: 1, up to 3 (workers auto) x 1 GPU") and "at most 6.0 GPU-hours" in lines[2]
    assert lines[3] == (
        "jobs: 5 runs as 3 array(s) of at most 2 tasks (MaxArraySize), 1 grader(s), 1 top-up job (none with --wait "
        "unless runs are deferred): 7 jobs at once"
    )
    assert lines[4] == "queue limits: QOS a2rl-test-qos allows 20 queued jobs: all 7 fit at once"

    ensure_prepared(get_task("echo", [Path(p) for p in spec.task_paths]), tmp_path / "data")  # 1 held-out example
    lines = capacity.plan(spec, runs, params, slurm(runner, FakeClock(), spec), 10)
    # (5 x 10 + 1 baseline) evaluations x 1 example x 256 new tokens (echo's task.yaml sets none), 2B parameters:
    # the bench's 7,619 tokens/s on an H200 for 100M parameters is 381 for 2B
    expected_s = 51 * 1 * capacity.DEFAULT_NEW_TOKENS / (1600 / 0.21 * 100e6 / 2e9)
    assert lines[1].endswith(f": {capacity.hours(expected_s)} GPU-hours of evaluation"), lines[1]
    assert "echo 1 examples x 256 new tokens" in lines[1]
    assert "at tokens/s per GPU ~381 for tiny-llama (2B): 7619 tokens/s measured for 100M parameters" in lines[1]
    assert "tools/bench/grading.py on an H200" in lines[1] and "set grader.tokens_per_s" in lines[1]
    sized = spec.model_copy(update={"grader": spec.grader.model_copy(update={"tokens_per_s": 6.528})})
    line = capacity.plan(sized, runs, {}, slurm(runner, FakeClock(), sized), 10)[1]  # the model's size not needed
    # 51 x 256 tokens / 6.528 tokens/s = 2000 s on the grader's 1 GPU
    assert line.endswith("at 6.528 tokens/s per grader job (grader.tokens_per_s): 0.56 GPU-hours of evaluation"), line
    # GPU limits: 5 runs x 2 GPUs + up to 3 graders x 1 GPU = 13 at once
    assert lines[5] == "GPU limits: none set on QOS a2rl-test-qos: 13 GPUs at once"
    runner.tres = "a2rl-test-qos|cpu=64,gres/gpu=8|gres/gpu:h100=16,gres/gpu=20\n"
    assert capacity.plan(spec, runs, params, slurm(runner, FakeClock(), spec), 10)[5] == (
        "GPU limits: QOS a2rl-test-qos GrpTRES gres/gpu=8, MaxTRESPerUser gres/gpu=16: the sweep asks for 13 GPUs "
        "at once, 8 at most run together; the rest wait in the queue (reason QOSGrpGRES / QOSMaxGRESPerUser) until "
        "GPUs free up"
    )
    runner.tres = "a2rl-test-qos|gres/gpu=16|\n"
    assert capacity.gpu_line(slurm(runner, FakeClock(), spec), 13) == (
        "GPU limits: QOS a2rl-test-qos GrpTRES gres/gpu=16: the sweep's 13 GPUs fit at once"
    )

    runner.qos = "a2rl-test-qos|4||\n"
    assert capacity.plan(spec, runs, params, slurm(runner, FakeClock(), spec), 10)[4] == (
        "queue limits: QOS a2rl-test-qos allows 4 queued jobs: 7 do not fit at once; 3 runs wait (deferred) and a "
        "top-up job submits them as jobs end"
    )
    runner.squeue = "".join(f"5_{i}|PENDING|Priority|a2rl-test-qos\n" for i in range(3))  # queued by you now
    assert capacity.plan(spec, runs, params, slurm(runner, FakeClock(), spec), 10)[4] == (
        "queue limits: QOS a2rl-test-qos allows 4 queued jobs (3 of them taken by your jobs queued now): 7 do not "
        "fit at once; 6 runs wait (deferred) and a top-up job submits them as jobs end"
    )
    runner.assoc, runner.qos = "root||||\n", ""
    assert capacity.queue_line(slurm(runner, FakeClock(), spec), 6).startswith("queue limits: none set for you")
    no_qos = spec.model_copy(update={"resources": spec.resources.model_copy(update={"qos": None})})
    assert capacity.gpu_line(slurm(runner, FakeClock(), no_qos), 13).startswith("GPU limits: not read (no QOS set")
    runner.sacctmgr_rc = 1  # no slurmdbd
    assert capacity.queue_line(slurm(runner, FakeClock(), spec), 6) == (
        "queue limits: unknown (sacctmgr is not there or did not answer)"
    )
    assert capacity.gpu_line(slurm(runner, FakeClock(), spec), 13) == (
        "GPU limits: unknown (sacctmgr is not there or did not answer)"
    )


def test_a_local_job_that_ended_unreaped_is_not_alive():
    """A cancelled local job's process ends before the launch that started it reaps it (a zombie): the monitor
    must see it gone, or the run waits for its result forever."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        until(lambda: psutil.Process(child.pid).status() == psutil.STATUS_ZOMBIE, 60, "the child to exit")
        (state,) = make_scheduler("local").states([str(child.pid)]).values()
        assert state.alive is False and "has exited" in state.reason
    finally:
        child.wait()
    alive = subprocess.Popen(["sleep", "30"])
    try:
        assert make_scheduler("local").states([str(alive.pid)])[str(alive.pid)].alive is True
    finally:
        alive.kill()
        alive.wait()
