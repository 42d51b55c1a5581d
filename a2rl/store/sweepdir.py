"""The sweep directory: everything a sweep records, on the shared file system, outside every workspace; made 0700,
so another user of the cluster reads none of it.

sweep.yaml            the spec as the user wrote it (frozen at first launch)
.a2rl-key             the HMAC key signing ledger, queue, result and baseline records (0600; integrity.py)
sweep.json            FrozenSweep: the validated spec with absolute paths, and the sweep's id
runs.json             RunIndex: every run of the grid
runs/<run_id>/        run.json, status.json, result.json, agent.log (written by the run's job); resume/:
                      the workspace's code/, output/ and home/ saved when the job was interrupted
queue/  ledger/       submission queue and ledger (see queue.py, ledger.py)
submissions/<id>/     frozen copies of submitted weights, read by the grader
baselines/            baseline scores per (task, model weights, evaluator version, protocol)
graders/<holder>.json grader heartbeats (jobs.json: their jobs)
topup/jobs.json       the top-up job that watches the sweep (services.py)
drivers/<name>/       a local driver's endpoint.json and jobs.json (see a2rl/drivers/)
jobs/                 submitit's folders, one per launch
"""

from __future__ import annotations

import os
import secrets
from functools import cached_property
from pathlib import Path
from typing import Literal

from a2rl.records import Record, RecordError, atomic_write_text, now
from a2rl.spec.clusters import profile_of
from a2rl.spec.grid import RunSpec
from a2rl.spec.models import default_data_root
from a2rl.spec.roots import SCRATCH_FIX, default_scratch, expand_root, private_dir, usable_dir
from a2rl.spec.sweep import SweepSpec
from a2rl.store.freshness import heartbeat_stale
from a2rl.store.integrity import create_key, read_key
from a2rl.store.ledger import Ledger
from a2rl.store.queue import SubmissionQueue
from a2rl.store.retries import RETRIES, retried
from a2rl.version import __version__

HEARTBEAT_S = 10.0
STALE_S = 6 * HEARTBEAT_S  # a run or grader silent for this long is presumed dead


class FrozenSweep(Record):
    spec: SweepSpec
    sweep_uid: str
    created_at: float
    a2rl_version: str


class RunIndex(Record):
    runs: list[RunSpec]


class RunStatus(Record):
    """Written by the launcher (submitted, or deferred: held back by a queue limit until a top-up submits it),
    then by the run's job: running, finishing (its result is written and the job waits for the scores of its
    submissions), finished, or interrupted (stopped by SIGTERM; a requeued job resumes it)."""

    run_id: str
    state: Literal["deferred", "submitted", "running", "finishing", "finished", "interrupted"]
    job_id: str | None = None
    executor: str | None = None
    attempt: int = 0
    host: str | None = None
    heartbeat_at: float
    agent_seconds: float = 0.0  # budget clock used so far (carried across a requeue)
    uncharged_seconds: float = 0.0  # grading waits not charged so far (carried too: the cap is the run's)
    setup_seconds: list[float] = []  # per attempt: from the job's start to the agent's (the last one so far)

    def waiting_for_scores(self) -> bool:
        """The job has written the run's result and still waits to complete it: the run is not over yet."""
        return self.state == "finishing" and not self.stale()

    def stale(self) -> bool:
        """No heartbeat for STALE_S on the reader's clock (store/freshness.py: never another node's clock)."""
        return heartbeat_stale(("run", self.run_id), self.heartbeat_at, self.host, STALE_S)


class GraderBeat(Record):
    holder: str
    host: str
    pid: int
    started_at: float
    heartbeat_at: float
    graded: int
    state: Literal["idle", "grading", "baseline", "exited"]
    note: str = ""
    # the grader's engine (llm/backends.py Engine): fresh starts, weights reloaded in place, failed reloads
    starts: int = 0
    reloads: int = 0
    reload_failures: int = 0

    def serving(self) -> bool:
        """Not `exited`, and heart-beating as this reader's clock sees it (store/freshness.py)."""
        silent = heartbeat_stale(("grader", self.holder), self.heartbeat_at, self.host, STALE_S)
        return self.state != "exited" and not silent


class SweepDir:
    """The paths and records of one sweep directory (see the module docstring); the one way every stage finds
    the spec, the runs, their status and results, the queue, the ledger and the key."""

    def __init__(self, root: Path):
        self.root = Path(root).resolve()
        self.spec_yaml = self.root / "sweep.yaml"
        self.frozen_path = self.root / "sweep.json"
        self.index_path = self.root / "runs.json"
        self.baselines = self.root / "baselines"
        self.submissions = self.root / "submissions"
        self.graders = self.root / "graders"
        self.grader_jobs = self.graders / "jobs.json"
        self.topup_jobs = self.root / "topup" / "jobs.json"  # the top-up job that watches the sweep
        self.drivers = self.root / "drivers"
        self.jobs = self.root / "jobs"
        self._runs = self.root / "runs"
        RETRIES.bind(self.root)  # this process's retried reads are counted where `a2rl status` finds them

    def exists(self) -> bool:
        return self.frozen_path.exists()

    def frozen(self) -> FrozenSweep:
        return FrozenSweep.load(self.frozen_path)

    @property
    def spec(self) -> SweepSpec:
        return self.frozen().spec

    def runs(self) -> list[RunSpec]:
        return RunIndex.load(self.index_path).runs

    def run(self, run_id: str) -> RunSpec:
        return RunSpec.load(self.run_dir(run_id) / "run.json")

    def run_dir(self, run_id: str) -> Path:
        return self._runs / run_id

    def status(self, run_id: str) -> RunStatus | None:
        """The run's status; a torn or stale read is retried (store/retries.py)."""
        return retried(lambda: RunStatus.load_or_none(self.run_dir(run_id) / "status.json"), "status")

    def serving_graders(self) -> list[GraderBeat]:
        """The graders whose heartbeat is fresh and does not say `exited` (a damaged heartbeat is left to the
        monitor to report)."""
        beats = []
        for path in self.graders.glob("grader*.json"):
            try:
                beat = retried(lambda path=path: GraderBeat.load(path), "heartbeat")
            except RecordError:
                continue
            if beat.serving():
                beats.append(beat)
        return beats

    def resume_dir(self, run_id: str) -> Path:
        return self.run_dir(run_id) / "resume"

    def result_path(self, run_id: str) -> Path:
        return self.run_dir(run_id) / "result.json"

    @cached_property
    def key(self) -> bytes:
        return read_key(self.root)

    @property
    def queue(self) -> SubmissionQueue:
        return SubmissionQueue(self.root / "queue", self.key, self.spec.grader.lock_timeout_s)

    @property
    def ledger(self) -> Ledger:
        return Ledger(self.root / "ledger", self.key)

    def baseline_dir(self) -> Path:
        cache = self.spec.grader.baseline_cache
        return Path(cache) if cache else self.baselines

    def scratch_root(self) -> Path:
        """Where workspaces go, resolved in the job (so `$TMPDIR` is the node's) and created there: the sweep's
        scratch_root, else its cluster profile's, else $A2RL_SCRATCH, else <tmp>/a2rl-scratch-USER (this user's
        own, 0700). `sweep` means the sweep directory itself (shared: a requeued run finds its workspace on any
        node). One that cannot be used is a RootError naming these settings."""
        spec = self.spec
        root = spec.scratch_root or profile_of(spec).scratch_root or os.environ.get("A2RL_SCRATCH")
        if root == "sweep":
            return self.root / "workspaces"
        if root:
            return usable_dir(expand_root(root, "scratch root", SCRATCH_FIX), "scratch root", SCRATCH_FIX)
        return private_dir(default_scratch(), "scratch root", SCRATCH_FIX)

    def workspace(self, run_id: str) -> Path:
        """Per-run workspace on scratch; the sweep uid keeps two sweeps of the same name apart."""
        f = self.frozen()
        return self.scratch_root() / f"{f.spec.name}-{f.sweep_uid}" / run_id

    def data_root(self) -> Path:
        return Path(self.spec.data_root or default_data_root())

    def create(self, spec: SweepSpec, spec_text: str, runs: list[RunSpec]) -> None:
        # only its user may enter: it holds the key, the ledger, the submissions and the runs' saved workspaces,
        # and may lie in a group project directory or a home others can read (tests/test_cluster_user.py)
        self.root.parent.mkdir(parents=True, exist_ok=True)
        self.root.mkdir(mode=0o700, exist_ok=True)
        os.chmod(self.root, 0o700)
        create_key(self.root)
        atomic_write_text(self.spec_yaml, spec_text)
        FrozenSweep(spec=spec, sweep_uid=secrets.token_hex(4), created_at=now(), a2rl_version=__version__).dump(
            self.frozen_path
        )
        RunIndex(runs=runs).dump(self.index_path)
        for run in runs:
            run.dump(self.run_dir(run.run_id) / "run.json")
            # its ledger folder made now, before any reader looks for it: a shared file system (NFS, FUSE) answers
            # a folder looked up while missing as missing for up to its cache time, and the run's job would wait
            # that long for its first score (Ledger.listed)
            (self.ledger.root / run.run_id).mkdir(parents=True, exist_ok=True)
