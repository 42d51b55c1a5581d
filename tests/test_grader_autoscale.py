"""grader.workers: auto on the local executor and on the Slurm test cluster, for real: a burst of submissions to a slow
evaluator makes the graders start more grader jobs (up to max_workers) through the pool they carry, the backlog is
graded by several graders at once (sooner than one grader could have), and the extra graders leave when idle while the
last one stays until its own idle limit."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from a2rl.run.budget import Budget
from a2rl.run.submit import RunSubmitter
from a2rl.run.workspace import Workspace
from a2rl.scheduling.launcher import Launcher, open_sweep
from a2rl.store.services import ServiceJobs
from a2rl.store.sweepdir import GraderBeat
from conftest import FIXTURES, slurm_available, until, write_sweep

sys.path.insert(0, str(FIXTURES / "agents"))
from variants import make_variant  # noqa: E402

BURST, EVAL_S, MAX, IDLE_S = 5, 3.0, 2, 20


@pytest.mark.slow  # grader jobs start, grade a burst for half a minute, and leave
@pytest.mark.parametrize(
    "executor",
    [
        pytest.param("local", marks=pytest.mark.sidebyside),
        # not sidebyside: the second grader's job must start while the burst waits, on a cluster no other test fills
        pytest.param("slurm", marks=pytest.mark.slurm),
    ],
)
def test_a_burst_brings_more_graders_and_the_extras_leave(tmp_path: Path, tiny_model: Path, executor: str):
    if executor == "slurm" and not slurm_available():
        pytest.skip("no Slurm cluster (start one with tools/slurm/up.sh, or run tools/test.sh)")
    grader = {
        "workers": "auto",
        "max_workers": MAX,
        "scale_wait_s": 2,
        "scale_idle_s": 5,
        "poll_s": 0.05,
        "lease_s": 10,
        "idle_timeout_s": IDLE_S,  # no run is at work: the last grader ends the test by leaving
        "task_options": {"echo": {"sleep_s": EVAL_S}},
    }
    if executor == "slurm":  # the test cluster's nodes are small
        grader["mem_gb"] = 1
    cluster = {"cluster": "local"} if executor == "slurm" else {}
    spec = write_sweep(tmp_path, seeds=list(range(BURST)), grader=grader, executor=executor, **cluster)
    sweep, runs = open_sweep(spec, tmp_path / "sd")
    launcher = Launcher(sweep, executor)
    launcher.submit([])  # the services only: workers auto starts one grader
    jobs = lambda: ServiceJobs.load(sweep.grader_jobs).job_ids  # noqa: E731
    try:
        assert len(jobs()) == 1
        until(lambda: sweep.serving_graders(), 300, "the first grader to serve")
        for i, run in enumerate(runs):  # the burst: every run submits at once, none waits for its score
            ws = Workspace(tmp_path / "ws" / run.run_id)
            ws.code.mkdir(parents=True)
            model = make_variant(tiny_model, ws.output / "v", score=float(i), salt=i + 1)
            RunSubmitter(sweep, run, ws, Budget(1e9)).submit(str(model), wait=False)
        until(lambda: len(sweep.ledger.all_entries()) == BURST, 600, "the burst to be graded")
        entries = sorted(sweep.ledger.all_entries(), key=lambda e: e.claimed_at)
        assert sorted(e.score for e in entries) == [float(i) for i in range(BURST)]
        graders = {e.grader for e in entries}
        assert 2 <= len(graders) <= MAX, graders
        assert 2 <= len(jobs()) <= MAX
        # graded at once by different graders: an overlap of two evaluations
        assert any(a.grader != b.grader and a.claimed_at < b.claimed_at < a.graded_at for a in entries for b in entries)
        # the backlog drained sooner than one grader, evaluating one submission after another, could have
        serial = sum(e.eval_seconds for e in entries)
        drained = max(e.graded_at for e in entries) - entries[0].claimed_at
        waits = [round(e.claimed_at - e.submitted_at, 1) for e in entries]
        print(
            f"\n{len(graders)} graders drained {BURST} in {drained:.1f} s ({serial:.1f} s of evaluation); waits {waits}"
        )
        assert drained < serial
        # the extras leave when idle, the last one only at its idle limit
        beats = lambda: [GraderBeat.load(p) for p in sweep.graders.glob("grader*.json")]  # noqa: E731
        until(lambda: len(beats()) == len(jobs()) and all(b.state == "exited" for b in beats()), 300, "the end")
        notes = sorted(b.note for b in beats())
        last = f"idle for {IDLE_S} s with no run at work, queued or deferred"
        assert notes.count(last) == 1 and all(n.endswith("other grader(s) serve") for n in notes if n != last), notes
    finally:
        launcher.scheduler.cancel(jobs())
