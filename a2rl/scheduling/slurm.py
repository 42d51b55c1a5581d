"""Slurm over submitit: job arrays split at MaxArraySize, states from squeue then sacct, QOS limits from sacctmgr.

Every query goes through an injectable command runner (tests feed canned outputs). States are cached: the
scheduler is asked at most once per `min_interval_s` (as submitit's own watcher does), except for a job id it
has never seen, so a follower polling files every 2 s does not load the controller."""

from __future__ import annotations

import getpass
import re
import time
from collections import Counter
from typing import Any, Callable, Iterable

from submitit.core.utils import FailedJobError

from a2rl.scheduling.base import ALIVE, JobState, QueueFull, Runner, Scheduler, Shape, run_command
from a2rl.spec.clusters import SIGNAL_DELAY_S, profile_of
from a2rl.spec.registry import HOME
from a2rl.spec.sweep import SweepSpec

# sbatch's words for a submission refused by a QOS or association limit (the job was not queued)
LIMIT_REFUSAL = re.compile(r"QOSMax\w*Limit|QOSGrp\w*Limit|AssocMax\w*Limit|AssocGrp\w*Limit|MaxSubmit\w*Limit")
_UNSET: Any = object()


def parse_squeue(text: str) -> dict[str, tuple[str, str, str]]:
    """`squeue -h -r -o %i|%T|%r|%q` → job id → (state, reason, QOS)."""
    out = {}
    for line in text.splitlines():
        if line.strip():
            jid, state, reason, qos = (line.strip().split("|") + ["", "", ""])[:4]
            out[jid] = (state, reason, qos)
    return out


def parse_sacct(text: str) -> dict[str, tuple[str, str]]:
    """`sacct -n -P -X -o JobID,State,ExitCode` → job id → (state, exit code); "CANCELLED by 0" → CANCELLED."""
    out = {}
    for line in text.splitlines():
        if line.strip():
            jid, state, code = (line.strip().split("|") + ["", ""])[:3]
            out[jid] = ((state.split() or ["UNKNOWN"])[0], code)
    return out


def _ints(fields: Iterable[str]) -> list[int]:
    return [int(f) for f in fields if f.strip().isdigit()]


def parse_assoc(text: str, account: str | None) -> tuple[list[int], str | None]:
    """`sacctmgr -n -P show assoc where user=U format=Account,DefaultQOS,MaxSubmit,MaxJobs,GrpSubmit` → the
    limits of the user's associations (those of `account` when given) and their default QOS."""
    limits, default_qos = [], None
    for line in text.splitlines():
        acct, dqos, *nums = (line.strip().split("|") + [""] * 5)[:5]
        if not line.strip() or (account and acct != account):
            continue
        limits += _ints(nums)
        default_qos = default_qos or dqos or None
    return limits, default_qos


def parse_qos(text: str) -> list[int]:
    """`sacctmgr -n -P show qos where name=Q format=Name,MaxSubmitPU,MaxJobsPU,GrpSubmit` → its limits."""
    return [n for line in text.splitlines() for n in _ints(line.split("|")[1:])]


def parse_tres_gpus(text: str) -> dict[str, int]:
    """`sacctmgr -n -P show qos where name=Q format=Name,GrpTRES,MaxTRESPU` → the limits on GPUs it sets:
    {"GrpTRES": n, "MaxTRESPerUser": n}, each the fewest of its gres/gpu entries (typed ones, gres/gpu:a100=2,
    included)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        fields = (line.strip().split("|") + ["", ""])[1:3]
        for name, tres in zip(("GrpTRES", "MaxTRESPerUser"), fields):
            gpus = [int(m) for m in re.findall(r"gres/gpu(?::[^=,]+)?=(\d+)", tres)]
            if gpus:
                out[name] = min([*gpus, out.get(name, gpus[0])])
    return out


class SlurmScheduler(Scheduler):
    kind = "slurm"

    def __init__(
        self,
        spec: SweepSpec | None = None,
        folder=None,
        runner: Runner = run_command,
        clock: Callable[[], float] = time.monotonic,
        min_interval_s: float = 30.0,
    ):
        super().__init__(spec, folder)
        self.runner, self.clock, self.min_interval_s = runner, clock, min_interval_s
        self.user = getpass.getuser()
        self._states: dict[str, JobState] = {}
        self._asked_at: float | None = None
        # the user's queued jobs (array tasks) at the last query plus those submitted since: all (None), per QOS
        self._queued: Counter[str | None] = Counter()
        self._refused = False  # a limit refused a submission since the last query
        self._limits: tuple[str | None, int | None, int | None] = _UNSET
        self._max_array: int | None = None
        self.limits_read = False  # sacctmgr answered (its limits, or none, are the cluster's)

    # ---------------------------------------------------------------- submitting
    def parameters(self, shape: Shape) -> dict[str, Any]:
        prof, r = profile_of(self.spec), self.spec.resources
        pick = {k: getattr(r, k) or getattr(prof, k) for k in ("partition", "account", "qos", "constraint")}
        params: dict[str, Any] = {f"slurm_{k}": v for k, v in pick.items() if v}
        if r.array_parallelism:
            params["slurm_array_parallelism"] = r.array_parallelism
        if prof.setup:
            params["slurm_setup"] = [line.replace("{a2rl_home}", str(HOME)) for line in prof.setup]
        extra = {k: v for k, v in {**prof.sbatch, **r.sbatch}.items() if not (shape.now and k in ("begin", "hold"))}
        if extra:
            params["slurm_additional_parameters"] = extra
        if prof.gres_gpu and shape.gpus:  # typed GPUs (gpu:a100) are asked for as gres, not --gpus-per-node
            params.update(gpus_per_node=None, slurm_gres=f"{prof.gres_gpu}:{shape.gpus}")
        params["slurm_signal_delay_s"] = SIGNAL_DELAY_S
        return params

    def max_array_size(self) -> int:
        """The largest array the cluster accepts: the profile's, else `scontrol show config`'s MaxArraySize."""
        if self._max_array is None:
            self._max_array = profile_of(self.spec).max_array_size
        if self._max_array is None:
            out = self.runner(["scontrol", "show", "config"]).stdout
            m = re.search(r"^MaxArraySize\s*=\s*(\d+)", out, re.M)
            self._max_array = int(m.group(1)) if m else 1001
        return self._max_array

    def submit(self, shape: Shape, fn: Callable, args: list[tuple]) -> list[str]:
        """As arrays of at most MaxArraySize tasks; stops at the first array a limit refuses."""
        ex, ids, size = self.executor(shape), [], self.max_array_size()
        for part in (args[i : i + size] for i in range(0, len(args), size)):
            try:
                with ex.batch():
                    jobs = [ex.submit(fn, *a) for a in part]
            except FailedJobError as e:
                if not LIMIT_REFUSAL.search(str(e)):
                    raise
                self._refused = True  # full until a query says otherwise
                break
            ids += [str(j.job_id) for j in jobs]
        self._states.update({i: JobState(True, state="PENDING") for i in ids})
        self._queued[None] += len(ids)
        if self._limits is not _UNSET:
            self._queued[self._limits[0]] += len(ids)
        return ids

    def submit_one(self, shape: Shape, fn: Callable) -> str:
        try:
            return super().submit_one(shape, fn)
        except QueueFull:
            raise QueueFull(
                f"Slurm refused job {shape.name}: a QOS or association limit on queued jobs is reached"
            ) from None

    def cancel(self, job_ids: list[str]) -> None:
        if job_ids:
            self.runner(["scancel", *job_ids])
            for i in job_ids:  # ask again next time
                self._states.pop(i, None)

    # ---------------------------------------------------------------- asking
    def _due(self) -> bool:
        return self._asked_at is None or self.clock() - self._asked_at >= self.min_interval_s

    def states(self, job_ids: Iterable[str]) -> dict[str, JobState]:
        ids = set(job_ids)
        if ids and (self._due() or ids - self._states.keys()):
            self._refresh(ids)
        return {i: self._states.get(i, JobState(None)) for i in ids}

    def _refresh(self, ids: set[str]) -> None:
        """One squeue for the user's jobs, then one sacct for the asked or live ones squeue no longer lists."""
        watch = ids | {i for i, s in self._states.items() if s.alive is not False}
        self._asked_at = self.clock()
        q = self.runner(["squeue", "-h", "-r", "-u", self.user, "-o", "%i|%T|%r|%q"])
        if q.returncode != 0:
            self._states.update({i: JobState(None) for i in watch})
            return
        listed = parse_squeue(q.stdout)
        self._queued = Counter([None] * len(listed) + [qos for _, _, qos in listed.values()])
        self._refused = False
        missing = sorted(watch - listed.keys())
        acct = (
            parse_sacct(
                self.runner(["sacct", "-n", "-P", "-X", "-o", "JobID,State,ExitCode", "-j", ",".join(missing)]).stdout
            )
            if missing
            else {}
        )
        for i in watch:
            if i in listed:
                state, reason, _ = listed[i]
                self._states[i] = JobState(state in ALIVE, None if state in ALIVE else f"{state} {reason}", state)
            elif i in acct:
                state, code = acct[i]
                self._states[i] = JobState(
                    state in ALIVE, None if state in ALIVE else f"Slurm state {state} (exit code {code})", state
                )
            else:
                self._states[i] = JobState(
                    False, "the job is no longer known to Slurm (squeue) and sacct has no record"
                )

    def limits(self) -> tuple[str | None, int | None, int | None]:
        """(QOS, its limit, the association's limit) on the user's queued jobs: the fewest of MaxSubmitJobsPU,
        MaxJobsPU, GrpSubmit of the sweep's QOS (or the user's default) and of the user's association; None
        where sacctmgr sets none (or does not answer). Read once per scheduler."""
        if self._limits is _UNSET:
            account = qos = None
            if self.spec is not None:
                prof, r = profile_of(self.spec), self.spec.resources
                account, qos = r.account or prof.account, r.qos or prof.qos
            a = self.runner(
                [
                    "sacctmgr",
                    "-n",
                    "-P",
                    "show",
                    "assoc",
                    "where",
                    f"user={self.user}",
                    "format=Account,DefaultQOS,MaxSubmit,MaxJobs,GrpSubmit",
                ]
            )
            self.limits_read = a.returncode == 0
            assoc, default_qos = parse_assoc(a.stdout, account) if a.returncode == 0 else ([], None)
            qos_limits = []
            if qos := qos or default_qos:
                q = self.runner(
                    [
                        "sacctmgr",
                        "-n",
                        "-P",
                        "show",
                        "qos",
                        "where",
                        f"name={qos}",
                        "format=Name,MaxSubmitPU,MaxJobsPU,GrpSubmit",
                    ]
                )
                qos_limits = parse_qos(q.stdout) if q.returncode == 0 else []
            self._limits = (qos, min(qos_limits, default=None), min(assoc, default=None))
        return self._limits

    def gpu_limits(self) -> dict[str, int] | None:
        """The GPU limits (GrpTRES, MaxTRESPerUser gres/gpu) of the sweep's QOS (or the user's default): {} where
        it sets none, None where there is no QOS or sacctmgr does not answer."""
        qos = self.limits()[0]
        if qos is None:
            return None
        q = self.runner(
            ["sacctmgr", "-n", "-P", "show", "qos", "where", f"name={qos}", "format=Name,GrpTRES,MaxTRESPU"]
        )
        return parse_tres_gpus(q.stdout) if q.returncode == 0 else None

    def capacity(self) -> int | None:
        """Room under the QOS limit (counting the user's jobs in that QOS; a shared cluster's other jobs do not
        count against it) and the association's (counting all the user's jobs)."""
        qos, qos_limit, assoc_limit = self.limits()
        if qos_limit is None and assoc_limit is None:
            return None
        if self._due():
            self._refresh(set())
        if self._refused:
            return 0
        rooms = [
            limit - self._queued[key] for key, limit in ((qos, qos_limit), (None, assoc_limit)) if limit is not None
        ]
        return max(0, min(rooms))
