"""The capacity plan `a2rl launch --dry-run` and `a2rl validate` print: what a sweep will ask of the cluster.

- runs: each a job of budget + resources.setup_margin_s (or resources.time_limit) holding resources.gpus and
  resources.cpus, so GPU-hours = runs x job time x gpus (CPU-hours likewise): what the runs reserve, the most
  they use;
- grading: an estimate, stated so it can be argued with: (runs x expected submissions per run + one baseline
  per task x model x protocol) evaluations x held-out examples x new tokens per example, generated at
  GPU_TOKENS_PER_S_1B tokens/s per grader GPU for a 1B-parameter model (a batched bf16 engine on a
  data-centre GPU), or CPU_TOKENS_PER_S_1B per grader CPU, in proportion to 1B / the model's parameters;
  held-out examples are counted in the prepared data (lines of its .jsonl files, within the task's `limit`),
  unknown where the task is not prepared yet; the grader jobs themselves hold their GPUs for their whole time;
- jobs: one array per resource shape split at MaxArraySize, the graders, local driver servers, the top-up job;
- QOS: the fewest queued jobs the user's QOS and association allow (sacctmgr, as the launch reads them), or
  "unknown" where sacctmgr is not there or does not answer.
"""

from __future__ import annotations

import math
from pathlib import Path

from a2rl.drivers.endpoint import drivers_used
from a2rl.scheduling.base import Scheduler, make_scheduler, resolve_kind
from a2rl.scheduling.slurm import SlurmScheduler
from a2rl.spec.grid import RunSpec
from a2rl.spec.models import default_data_root
from a2rl.spec.sweep import SweepSpec
from a2rl.spec.tasks import get_task

GPU_TOKENS_PER_S_1B = 2000.0  # per grader GPU, 1B parameters
CPU_TOKENS_PER_S_1B = 20.0  # per grader CPU core, 1B parameters (fp32, transformers)
DEFAULT_NEW_TOKENS = 256  # per held-out example where neither the task nor grader.task_options says


def hours(seconds: float) -> str:
    h = seconds / 3600
    return f"{h:.1f}" if h >= 1 or h == 0 else f"{h:.2g}"


def duration(seconds: float) -> str:
    h, m = divmod(round(seconds / 60), 60)
    return f"{h}h{m:02d}m" if h else f"{m}m"


def heldout_examples(spec: SweepSpec, task_name: str) -> int | None:
    """Held-out examples the grader scores for a task: lines of the prepared held-out .jsonl files, within
    the task's `limit`; None where the task is not prepared (or its held-out data is not .jsonl)."""
    task = get_task(task_name, [Path(p) for p in spec.task_paths])
    heldout = task.data(Path(spec.data_root) if spec.data_root else default_data_root()).heldout_dir
    files = sorted(heldout.glob("*.jsonl")) if heldout.is_dir() else []
    if not files:
        return None
    n = sum(sum(1 for line in f.open() if line.strip()) for f in files)
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
    if isinstance(scheduler, SlurmScheduler):
        size = scheduler.max_array_size()
        arrays = math.ceil(len(runs) / size) if runs else 0
        shape = f"{arrays} array(s) of at most {size} tasks (MaxArraySize)"
    else:
        shape = "local processes (no arrays)"
    driver_text = f", {len(drivers)} local driver server(s)" if drivers else ""
    lines.append(
        f"jobs: {len(runs)} runs as {shape}, {g.first_workers} grader(s){driver_text}: {len(runs) + services} "
        f"jobs at once"
    )
    lines.append(queue_line(scheduler, len(runs) + services))
    return lines


def _grading(spec: SweepSpec, runs: list[RunSpec], params: dict[str, int], per_run: int) -> str:
    g = spec.grader
    baselines = len(spec.tasks) * len(spec.model_entries) * len(spec.protocols)
    head = f"grading (estimate): {len(runs)} runs x {per_run} submissions + {baselines} baseline(s)"
    examples = {t: heldout_examples(spec, t) for t in spec.tasks}
    unknown = sorted({f"task {t} is not prepared" for t, n in examples.items() if n is None})
    unknown += sorted({f"model {m} is not built" for m in (x.name for x in spec.model_entries) if m not in params})
    if unknown:
        return f"{head}: unknown ({'; '.join(unknown)})"
    per_token = (GPU_TOKENS_PER_S_1B * g.gpus if g.gpus else CPU_TOKENS_PER_S_1B * g.cpus) * 1e9
    # baselines cost about what an average run's submission does
    one_each = sum(examples[run.task] * new_tokens(spec, run.task) * params[run.model.name] / per_token for run in runs)
    seconds = one_each * (per_run + baselines / max(1, len(runs)))
    unit = "GPU" if g.gpus else "CPU"
    sizes = ", ".join(f"{t} {examples[t]} examples x {new_tokens(spec, t)} new tokens" for t in spec.tasks)
    rate = GPU_TOKENS_PER_S_1B if g.gpus else CPU_TOKENS_PER_S_1B
    return (
        f"{head}; {sizes}; at ~{rate:g} tokens/s per {unit} for 1B parameters: "
        f"{hours(seconds * (g.gpus or g.cpus))} {unit}-hours of evaluation"
    )


def queue_line(scheduler: Scheduler, jobs: int) -> str:
    """Whether the user's limits on queued jobs let the sweep's jobs be queued at once."""
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
    return (  # the top-up job takes a place of its own
        f"queue limits: {name} allows {least} queued jobs{now_}: {jobs} do not fit at once; {jobs + 1 - room} runs "
        f"wait (deferred) and a top-up job submits them as jobs end"
    )


def print_plan(
    spec: SweepSpec, runs: list[RunSpec], params: dict[str, int], executor: str | None, per_run: int
) -> None:
    """The plan for the sweep's executor (or `executor`), under a heading."""
    scheduler = make_scheduler(resolve_kind(executor or spec.executor), spec)
    print(f"capacity plan ({scheduler.kind} executor; estimates as docs/slurm.md says):")
    for line in plan(spec, runs, params, scheduler, per_run):
        print(f"  {line}")
