"""The capacity plan `a2rl launch --dry-run` and `a2rl validate` print: what a sweep will ask of the cluster.

- runs: each a job of budget + resources.setup_margin_s (or resources.time_limit) holding resources.gpus and
  resources.cpus, so GPU-hours = runs x job time x gpus (CPU-hours likewise): what the runs reserve, the most
  they use;
- grading: an estimate, stated so it can be argued with: (runs x expected submissions per run + one baseline
  per task x model x protocol) evaluations x held-out examples x new tokens per example (max_new_tokens: every
  example is counted at its cap), at a rate measured by tools/bench/grading.py (GPU_RATE on GPUs, CPU_RATE per
  core on CPU) for its model, in inverse proportion to the parameter count (generation reads every weight per
  token), or at the sweep's grader.tokens_per_s; held-out examples are counted in the prepared data (lines of
  its .jsonl files, within the task's `limit`), or where the task is not prepared yet its task.yaml's
  `heldout_size` (unknown without one); the parameter counts need no weights (store/modeldirs.py planned_params);
  the grader jobs themselves hold their GPUs for their whole time;
- storage: what the runs keep in the sweep directory (recording/diskuse.py), in GiB per run and per sweep: the
  budget (storage.run_gb, by default from the model's size: spec/sizing.py) and the expected use, the frozen bf16
  copies the retention policy keeps at once (grading/retention.py) plus the code snapshots' cap; the workspace
  cap beside it;
- jobs: one array per resource shape split at MaxArraySize, the graders, local driver servers, and on Slurm the
  top-up job (a launch without --wait always submits it; with --wait only where runs are deferred);
- QOS: the fewest queued jobs the user's QOS and association allow (sacctmgr, as the launch reads them), or
  "unknown" where sacctmgr is not there or does not answer; and the QOS's GPU limits (GrpTRES, MaxTRESPerUser
  gres/gpu) against the GPUs the sweep's jobs ask for at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from a2rl.drivers.endpoint import drivers_used
from a2rl.grading.retention import keeps_all
from a2rl.scheduling.base import Scheduler, make_scheduler, resolve_kind
from a2rl.scheduling.slurm import SlurmScheduler
from a2rl.spec.grid import RunSpec
from a2rl.spec.models import default_data_root
from a2rl.spec.sizing import run_storage_gb, workspace_gb
from a2rl.spec.sweep import SweepSpec
from a2rl.spec.tasks import get_task
from a2rl.units import GIB, MIB


@dataclass(frozen=True)
class Rate:
    """New tokens/s one device (a GPU, or a CPU core) generated for a model of `params` parameters, and where
    that was measured."""

    tokens_per_s: float
    params: float
    source: str

    def at(self, params: int) -> float:
        return self.tokens_per_s * self.params / params


# tools/bench/grading.py's raw generation: arith's 200 held-out prompts x 8 new tokens (1,600) by its default
# 100M-parameter model, in one batch (docs/development.md "GPU check", the slower of two runs; docs/grading.md
# "Speed" for the CPU)
GPU_RATE = Rate(
    1600 / 0.21, 100e6, "tools/bench/grading.py on an H200: transformers bf16, 100M parameters, 1,600 tokens in 0.21 s"
)
CPU_RATE = Rate(
    320 / 2.66 / 2,
    100e6,
    "tools/bench/grading.py on 2 CPU cores: transformers fp32, 100M parameters, 320 tokens in 2.66 s",
)
DEFAULT_NEW_TOKENS = 256  # per held-out example where neither the task nor grader.task_options says


def hours(seconds: float) -> str:
    h = seconds / 3600
    return f"{h:.1f}" if h >= 1 or h == 0 else f"{h:.2g}"


def duration(seconds: float) -> str:
    h, m = divmod(round(seconds / 60), 60)
    return f"{h}h{m:02d}m" if h else f"{m}m"


def heldout_examples(spec: SweepSpec, task_name: str) -> int | None:
    """Held-out examples the grader scores for a task: lines of the prepared held-out .jsonl files, else (not
    prepared, or not .jsonl) the task's declared `heldout_size`, within the task's `limit`; None if neither."""
    task = get_task(task_name, [Path(p) for p in spec.task_paths])
    heldout = task.data(Path(spec.data_root) if spec.data_root else default_data_root()).heldout_dir
    files = sorted(heldout.glob("*.jsonl")) if heldout.is_dir() else []
    n = sum(sum(1 for line in f.open() if line.strip()) for f in files) if files else task.spec.heldout_size
    if n is None:
        return None
    limit = {**task.spec.eval, **spec.grader.task_options.get(task_name, {})}.get("limit")
    return min(n, int(limit)) if limit else n


def new_tokens(spec: SweepSpec, task_name: str) -> int:
    task = get_task(task_name, [Path(p) for p in spec.task_paths])
    return int(
        {**task.spec.eval, **spec.grader.task_options.get(task_name, {})}.get("max_new_tokens") or DEFAULT_NEW_TOKENS
    )


def plan(
    spec: SweepSpec,
    runs: list[RunSpec],
    params: dict[str, int],
    scheduler: Scheduler,
    submissions_per_run: int,
) -> list[str]:
    """The plan's lines. `params`: model name -> parameters, for the models already on disk."""
    r, g = spec.resources, spec.grader
    job_s = r.job_time_s(spec.budget)
    margin = f"time_limit {duration(job_s)}" if r.time_limit else f"set-up margin {duration(r.setup_margin_s)}"
    lines = [
        f"runs: {len(runs)} jobs x {duration(job_s)} (budget {duration(spec.budget)} + {margin}) x "
        f"{r.gpus} GPU, {r.cpus} CPU: {hours(len(runs) * job_s * r.gpus)} GPU-hours, "
        f"{hours(len(runs) * job_s * r.cpus)} CPU-hours"
    ]
    lines.append(_grading(spec, runs, params, submissions_per_run))
    grader_s = job_s + g.idle_timeout_s
    workers = f"{g.first_workers}, up to {g.most_workers} (workers auto)" if g.autoscale else str(g.workers)
    lines.append(
        f"grader jobs: {workers} x {g.gpus} GPU, {g.cpus} CPU for up to {duration(grader_s)} each: at most "
        f"{hours(g.most_workers * grader_s * g.gpus)} GPU-hours, {hours(g.most_workers * grader_s * g.cpus)} "
        f"CPU-hours held"
    )
    drivers = drivers_used(runs)
    services = g.first_workers + len(drivers)
    driver_text = f", {len(drivers)} local driver server(s)" if drivers else ""
    if isinstance(scheduler, SlurmScheduler):
        size = scheduler.max_array_size()
        arrays = math.ceil(len(runs) / size) if runs else 0
        shape = f"{arrays} array(s) of at most {size} tasks (MaxArraySize)"
        services += 1
        driver_text += ", 1 top-up job (none with --wait unless runs are deferred)"
    else:
        shape = "local processes (no arrays)"
    lines.append(
        f"jobs: {len(runs)} runs as {shape}, {g.first_workers} grader(s){driver_text}: {len(runs) + services} "
        f"jobs at once"
    )
    lines.append(queue_line(scheduler, len(runs) + services))
    gpus = len(runs) * r.gpus + g.most_workers * g.gpus + sum(spec.local_drivers[d].gpus for d in drivers)
    lines.append(gpu_line(scheduler, gpus))
    lines.append(storage_line(spec, runs, params, submissions_per_run))
    return lines


def _grading(spec: SweepSpec, runs: list[RunSpec], params: dict[str, int], per_run: int) -> str:
    g = spec.grader
    baselines = len(spec.tasks) * len(spec.model_entries) * len(spec.protocols)
    head = f"grading (estimate): {len(runs)} runs x {per_run} submissions + {baselines} baseline(s)"
    examples = {t: heldout_examples(spec, t) for t in spec.tasks}
    unknown = sorted({f"task {t} is not prepared (no heldout_size)" for t, n in examples.items() if n is None})
    if g.tokens_per_s is None:
        unknown += sorted({f"model {m}: size unknown" for m in (x.name for x in spec.model_entries) if m not in params})
    if unknown:
        return f"{head}: unknown ({'; '.join(unknown)})"
    units, unit = (g.gpus, "GPU") if g.gpus else (g.cpus, "CPU")
    rate = GPU_RATE if g.gpus else CPU_RATE

    def job_rate(model: str) -> float:  # new tokens/s of one grader job (its devices together)
        return g.tokens_per_s or rate.at(params[model]) * units

    # baselines cost about what an average run's submission does
    one_each = sum(examples[run.task] * new_tokens(spec, run.task) / job_rate(run.model.name) for run in runs)
    seconds = one_each * (per_run + baselines / max(1, len(runs)))
    sizes = ", ".join(f"{t} {examples[t]} examples x {new_tokens(spec, t)} new tokens" for t in spec.tasks)
    if g.tokens_per_s is not None:
        at = f"at {g.tokens_per_s:g} tokens/s per grader job (grader.tokens_per_s)"
    else:
        models = ", ".join(
            f"~{rate.at(params[m.name]):.3g} for {m.name} ({params[m.name] / 1e9:.2g}B)" for m in spec.model_entries
        )
        at = (
            f"at tokens/s per {unit} {models}: {rate.tokens_per_s:.0f} tokens/s measured for "
            f"{rate.params / 1e6:.0f}M parameters ({rate.source}), scaled by parameter count; "
            f"set grader.tokens_per_s to use your own"
        )
    return f"{head}; {sizes}; {at}: {hours(seconds * units)} {unit}-hours of evaluation"


def storage_line(spec: SweepSpec, runs: list[RunSpec], params: dict[str, int], per_run: int) -> str:
    """What the runs keep in the sweep directory: per run, at most storage.run_gb (its default from the model's
    size); expected, the frozen copies the policy keeps at once (bf16, the model's size each) plus the code
    snapshots' cap; per sweep, both summed over the runs."""
    if unknown := sorted({r.model.name for r in runs if r.model.name not in params}):
        return f"storage: unknown (model size unknown: {', '.join(unknown)})"
    keep_all = keeps_all(spec)
    copies = per_run if keep_all else 2  # at most the kept candidate (feedback: split) and the one being graded
    code_gb = spec.recording.max_run_mb * MIB / GIB
    budget = [run_storage_gb(spec, params[r.model.name]) for r in runs]
    expected = [min(b, copies * 2 * params[r.model.name] / GIB + code_gb) for r, b in zip(runs, budget)]
    policy = "every frozen copy (storage.keep: all)" if keep_all else "only what grader.final can still pick"
    return (
        f"storage: per run at most {max(budget, default=0):.1f} GiB (storage.run_gb"
        f"{'' if spec.storage.run_gb else ', default 6 bytes per parameter + 1 GiB'}), expected up to "
        f"{max(expected, default=0):.1f} GiB ({min(copies, per_run)} frozen bf16 copies of {per_run} submissions at "
        f"once: {policy}; code snapshots up to {code_gb:.1f} GiB); per sweep of {len(runs)} runs at most "
        f"{sum(budget):.1f} GiB, expected {sum(expected):.1f} GiB; workspaces up to "
        f"{max((workspace_gb(spec, params[r.model.name]) for r in runs), default=0):.1f} GiB each (limits.workspace_gb)"
    )


def queue_line(scheduler: Scheduler, jobs: int) -> str:
    """Whether the user's limits on queued jobs let the sweep's `jobs` (the top-up job's among them) be queued
    at once."""
    if not isinstance(scheduler, SlurmScheduler):
        return f"queue limits: none (the {scheduler.kind} executor)"
    qos, qos_limit, assoc_limit = scheduler.limits()
    if not scheduler.limits_read:
        return "queue limits: unknown (sacctmgr is not there or did not answer)"
    limits = [(f"QOS {qos}", qos_limit), ("association", assoc_limit)]
    set_ = [(name, n) for name, n in limits if n is not None]
    if not set_:
        return f"queue limits: none set for you (QOS {qos or 'default'}): all {jobs} jobs can be queued at once"
    name, least = min(set_, key=lambda x: x[1])
    room = scheduler.capacity()  # less the jobs you have queued now
    now_ = f" ({least - room} of them taken by your jobs queued now)" if room is not None and room < least else ""
    room = least if room is None else room
    if jobs <= room:
        return f"queue limits: {name} allows {least} queued jobs{now_}: all {jobs} fit at once"
    return (
        f"queue limits: {name} allows {least} queued jobs{now_}: {jobs} do not fit at once; {jobs - room} runs "
        f"wait (deferred) and a top-up job submits them as jobs end"
    )


def gpu_line(scheduler: Scheduler, gpus: int) -> str:
    """Whether the GPU limits of the user's QOS (GrpTRES: every user of the QOS together; MaxTRESPerUser) let
    the sweep's jobs hold their GPUs at once (runs, the most graders, local driver servers)."""
    if not isinstance(scheduler, SlurmScheduler):
        return f"GPU limits: none (the {scheduler.kind} executor)"
    qos = scheduler.limits()[0]
    if qos is None:
        return "GPU limits: not read (no QOS set by the sweep, its cluster profile or your association's default)"
    limits = scheduler.gpu_limits()
    if limits is None:
        return "GPU limits: unknown (sacctmgr is not there or did not answer)"
    if not limits:
        return f"GPU limits: none set on QOS {qos}: {gpus} GPUs at once"
    set_ = ", ".join(f"{k} gres/gpu={n}" for k, n in limits.items())
    least = min(limits.values())
    if gpus <= least:
        return f"GPU limits: QOS {qos} {set_}: the sweep's {gpus} GPUs fit at once"
    return (
        f"GPU limits: QOS {qos} {set_}: the sweep asks for {gpus} GPUs at once, {least} at most run together; "
        f"the rest wait in the queue (reason QOSGrpGRES / QOSMaxGRESPerUser) until GPUs free up"
    )


def print_plan(
    spec: SweepSpec, runs: list[RunSpec], params: dict[str, int], executor: str | None, per_run: int
) -> None:
    """The plan for the sweep's executor (or `executor`), under a heading."""
    scheduler = make_scheduler(resolve_kind(executor or spec.executor), spec)
    print(f"capacity plan ({scheduler.kind} executor; estimates as docs/slurm.md says):")
    for line in plan(spec, runs, params, scheduler, per_run):
        print(f"  {line}")
