"""The sweep spec (`sweep.yaml`): the grid tasks × agents × drivers × models × protocols × seeds and how to run it.

Validation reports every problem at once, each with its field path (`agents[1]: unknown agent 'claud' ...`);
unknown keys are errors. Nothing is submitted unless the whole spec is valid. The local drivers', recording's,
inspector's and caps' sections are in spec/settings.py.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, ValidationInfo, field_validator

from a2rl.errors import SpecError, format_validation_error, unknown_name
from a2rl.spec.models import BUILTIN_PREFIX, check_model_ref
from a2rl.spec.registry import HOME, load_yaml
from a2rl.spec.settings import (
    InspectorSettings,
    LocalDriver,
    RecordingSettings,
    RunLimits,
    StorageSettings,
    Strict,
)
from a2rl.spec.tasks import DEFAULT_PROTOCOL, EvalProtocol

NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
LOCAL_DRIVER = "local:"  # drivers served by the sweep itself: `local:<name of a local_drivers entry>`
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")


DURATION_ERROR = "expected a positive number of seconds or a duration like '30m', '2h'"


def parse_duration(v: Any) -> float:
    """Seconds from 600, '600', '10m', '1.5h', '2d'; every bad value (-300, '-5m', 'soon', 0, true) gets one
    wording."""
    m = None if isinstance(v, (bool, int, float)) else _DURATION.match(str(v))
    if isinstance(v, bool) or not (isinstance(v, (int, float)) or m):
        raise ValueError(DURATION_ERROR)
    seconds = float(v) if m is None else float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]
    if seconds <= 0:
        raise ValueError(DURATION_ERROR)
    return seconds


class AgentEntry(Strict):
    name: str
    label: str | None = Field(None, pattern=NAME)  # tells apart two entries of one agent with other args
    args: dict[str, Any] = {}
    drivers: list[str] | None = None  # this agent's drivers instead of the sweep's (mixing stacks' families)

    @property
    def key(self) -> str:
        return self.label or self.name


class ModelEntry(Strict):
    name: str = Field(pattern=NAME)
    path: str  # a directory, or builtin:NAME
    generation: str = "greedy"  # how the grader decodes this model: a preset under configs/generation/
    params: float | None = Field(None, gt=0, strict=False)  # for the plan sans weights; lax: YAML's 7.6e9 is str


class Resources(Strict):
    cpus: int = Field(1, ge=1)
    gpus: int = Field(0, ge=0)
    mem_gb: float = Field(8, gt=0)
    gpu_mem_gb: float = Field(80, gt=0)  # memory of one of the nodes' GPUs (A100/H100: 80), for the launch check
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    setup_margin_s: int = Field(600, ge=0)  # job time limit = budget + this margin (set-up, grading wait, wrap-up)
    time_limit: float | None = None  # an explicit job time limit instead (seconds or '2h')
    array_parallelism: int | None = Field(None, ge=1)
    sbatch: dict[str, Any] = {}  # further sbatch options, e.g. {reservation: x, begin: now+1hour}

    @field_validator("time_limit", mode="before")
    @classmethod
    def _limit(cls, v: Any) -> float | None:
        return None if v is None else parse_duration(v)

    def job_time_s(self, budget_s: float) -> float:
        return self.time_limit or budget_s + self.setup_margin_s


class GraderSettings(Strict):
    # grading daemons serving the sweep's queue: a number, or auto: one to start, another (up to max_workers)
    # whenever the oldest pending submission has waited scale_wait_s, and extras leave after scale_idle_s idle
    workers: Annotated[int, Field(ge=1)] | Literal["auto"] = 1
    max_workers: int = Field(4, ge=1)
    scale_wait_s: float = Field(300, gt=0)
    scale_idle_s: float = Field(600, gt=0)
    cpus: int = Field(1, ge=1)
    gpus: int = Field(0, ge=0)  # > 0: grade on GPUs (CUDA_VISIBLE_DEVICES of the job)
    mem_gb: float | None = Field(None, gt=0)  # default: what the largest model needs (spec/sizing.py), at least 8
    gpu_mem_gb: float = Field(80, gt=0)  # memory of one of the nodes' GPUs (A100/H100: 80), for the launch check
    # auto: vllm when it imports and a GPU is visible, else transformers (bf16 on CUDA, fp32 on CPU)
    backend: Literal["auto", "transformers", "vllm"] = "auto"
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)  # the share of each GPU vLLM may take
    max_model_len: int | None = Field(None, ge=1)  # vLLM's context length; default: the model's
    # vLLM without torch.compile or CUDA graphs: an engine starts in seconds, not a minute or more, and generates
    # slower (worth it where engines start often or held-out sets are small, e.g. on the CPU)
    enforce_eager: bool = False
    # the grader job's interpreter; default: with backend vllm the vLLM environment (vllm_python), else the launcher's
    python: str | None = None
    lease_s: float = Field(120, gt=0)  # a claim not renewed for this long is graded again
    poll_s: float = Field(0.2, gt=0)
    idle_timeout_s: float = Field(3600, gt=0)  # a daemon with nothing to do, and no run at work, this long exits
    max_attempts: int = Field(3, ge=1)  # a submission that kills its grader this often is recorded invalid
    # new tokens/s one grader job generates, as you measured it: the capacity plan's grading rate (default: our
    # bench's figure scaled by the model's size, scheduling/capacity.py)
    tokens_per_s: float | None = Field(None, gt=0)
    max_wait_s: float = Field(6 * 3600, gt=0)  # how long a blocking submit waits for its score
    # overrides the task's generation batch size; unset on a GPU (transformers): chosen from free memory
    batch_size: int | None = Field(None, ge=1)
    baseline_cache: str | None = None  # share baselines across sweeps; default: in the sweep directory
    keep_artifacts: bool = False  # keep every frozen submission's weights after grading (as storage.keep: all)
    # under `feedback: split` (task.yaml), which submission the grader scores on the final part once the run has
    # ended: the best on the feedback part, the last scored, or the latest the agent marked {"final": true}
    # (none marked: the best)
    final: Literal["best-feedback", "last", "agent"] = "best-feedback"
    # a submission not plausibly trained from the base model (grading/lineage.py): scored and marked, or refused
    foreign: Literal["flag", "refuse"] = "flag"
    task_options: dict[str, dict[str, Any]] = {}  # per task, merged over task.yaml's `eval` (judge endpoints...)
    lock_timeout_s: float = Field(30, gt=0)  # a queue or result lock held longer: skip this round, log it
    # grading waits are uncharged up to this fraction of the budget; past it they are the agent's time
    uncharged_wait_fraction: float = Field(0.5, ge=0)
    # what one submission may hold (top-level files, apparent sizes); the byte caps default to 3x the base model
    max_files: int = Field(64, ge=1)
    max_file_gb: float | None = Field(None, gt=0)
    max_total_gb: float | None = Field(None, gt=0)

    @property
    def autoscale(self) -> bool:
        return self.workers == "auto"

    @property
    def first_workers(self) -> int:
        """Graders the launch starts."""
        return 1 if self.workers == "auto" else self.workers

    @property
    def most_workers(self) -> int:
        """Graders the sweep may have at once."""
        return self.max_workers if self.workers == "auto" else self.workers


class SweepSpec(Strict):
    name: str = Field(pattern=NAME)
    tasks: list[str] = Field(min_length=1)
    agents: list[str | AgentEntry] = Field(min_length=1)
    drivers: list[str] = ["none"]
    modes: list[str] = Field(["free"], min_length=1)  # prompt modes (configs/prompts/<mode>.md), for driven agents
    models: list[str | ModelEntry] = Field(min_length=1)
    # evaluation protocols (spec/tasks.py PROTOCOLS): each is its own run, baseline and table row
    protocols: list[EvalProtocol] = Field([DEFAULT_PROTOCOL], min_length=1)
    seeds: list[int] = Field([0], min_length=1)
    budget: float  # agent wall seconds per run (grading waits do not count)
    executor: Literal["local", "slurm", "auto"] = "auto"
    cluster: str | None = None  # a profile under configs/clusters/ (Slurm)
    resources: Resources = Resources()
    grader: GraderSettings = GraderSettings()
    recording: RecordingSettings = RecordingSettings()
    limits: RunLimits = RunLimits()
    storage: StorageSettings = StorageSettings()
    local_drivers: dict[str, LocalDriver] = {}
    inspector: InspectorSettings | None = None  # off by default: no judge reads the runs
    scratch_root: str | None = None  # workspaces: a path ($VARS expand in the job) or `sweep`; see SweepDir
    data_root: str | None = None  # prepared task data; default ~/.cache/a2rl/data
    task_paths: list[str] = []  # extra task folders
    agent_paths: list[str] = []  # extra agent stack folders
    # the sandbox around each agent (run/isolation.py): auto = bubblewrap where it works, else apptainer where it
    # really starts a container
    isolation: Literal["auto", "bwrap", "apptainer", "none"] = "auto"
    # full: the host's network; api: only the grading server, the run's local driver and, through a proxy,
    # allow_hosts; none: only the grading server and the local driver (api and none need a sandbox)
    network: Literal["full", "api", "none"] = "api"
    allow_hosts: list[str] = []  # host or host:port (default port 443) reachable under network: api
    # mount the launcher's CLI logins (stacks' login_files, e.g. ~/.claude/.credentials.json) read-only into
    # each workspace's HOME, where they stand in for API keys; the sandbox binds them, so never with `none`
    agent_logins: bool = False
    # the agents' interpreter ({python} in stacks); default $A2RL_AGENT_PYTHON, else <source tree>/.venv-agent
    agent_python: str | None = None

    @field_validator("agent_logins")
    @classmethod
    def _logins(cls, v: bool, info: ValidationInfo) -> bool:
        if v and info.data.get("isolation") == "none":
            raise ValueError("agent_logins needs a sandbox to mount the login files read-only (isolation: none)")
        return v

    @field_validator("budget", mode="before")
    @classmethod
    def _budget(cls, v: Any) -> float:
        return parse_duration(v)

    @field_validator("agents", mode="before")
    @classmethod
    def _agents(cls, v: Any) -> Any:
        return [AgentEntry(name=a) if isinstance(a, str) else a for a in v] if isinstance(v, list) else v

    @field_validator("models", mode="before")
    @classmethod
    def _models(cls, v: Any) -> Any:
        return (
            [ModelEntry(name=_model_name(m), path=m) if isinstance(m, str) else m for m in v]
            if isinstance(v, list)
            else v
        )

    @field_validator("tasks", "agents", "drivers", "modes", "models", "protocols", "seeds")
    @classmethod
    def _unique(cls, v: list, info: ValidationInfo) -> list:
        """Per field, so a duplicate is one invalid field and the references of the others are still checked."""
        keys = [x.key if isinstance(x, AgentEntry) else x.name if isinstance(x, ModelEntry) else x for x in v]
        dup = sorted({k for k in keys if keys.count(k) > 1}, key=str)
        if dup:
            raise ValueError(
                f"duplicate entries {dup}"
                + (" (give agents a distinct `label`)" if info.field_name == "agents" else "")
            )
        return v

    def drivers_of(self, agent: AgentEntry) -> list[str]:
        return self.drivers if agent.drivers is None else agent.drivers

    @property
    def agent_entries(self) -> list[AgentEntry]:
        return [a for a in self.agents if isinstance(a, AgentEntry)]

    @property
    def model_entries(self) -> list[ModelEntry]:
        return [m for m in self.models if isinstance(m, ModelEntry)]


def local_driver_name(driver: str) -> str | None:
    return driver.removeprefix(LOCAL_DRIVER) if driver.startswith(LOCAL_DRIVER) else None


def _model_name(path: str) -> str:
    base = path.removeprefix(BUILTIN_PREFIX).rstrip("/").rsplit("/", 1)[-1]
    return re.sub(r"[^A-Za-z0-9_.-]", "-", base) or "model"


def agent_python(spec: SweepSpec) -> Path:
    """The agents' interpreter: the sweep's, else $A2RL_AGENT_PYTHON, else the source tree's .venv-agent."""
    return Path(os.path.expandvars(spec.agent_python)).expanduser() if spec.agent_python else default_agent_python()


def default_agent_python() -> Path:
    return Path(os.environ.get("A2RL_AGENT_PYTHON") or HOME / ".venv-agent" / "bin" / "python")


def vllm_python() -> Path:
    """The vLLM environment's interpreter (tools/setup-vllm-env.sh): $A2RL_VLLM_PYTHON, else <source tree>/.venv-vllm.
    Its own environment: vLLM pins the torch and transformers it was built against."""
    return Path(os.environ.get("A2RL_VLLM_PYTHON") or HOME / ".venv-vllm" / "bin" / "python")


def _interpreter(p: str | None) -> Path | None:
    return None if p is None else Path(os.path.expandvars(p)).expanduser()


def grader_python(spec: SweepSpec) -> Path | None:
    """The grader job's interpreter: grader.python, else the vLLM environment's for backend vllm, else None (the
    launcher's own)."""
    g = spec.grader
    return _interpreter(g.python) or (vllm_python() if g.backend == "vllm" else None)


def driver_python(driver: LocalDriver) -> Path:
    """The interpreter a vllm local driver's vLLM server runs in."""
    return _interpreter(driver.python) or vllm_python()


def load_sweep(path: Path) -> SweepSpec:
    """Parse and fully validate a sweep file: schema, registries, files. Raises SpecError listing every problem:
    the references of the valid fields are checked even when other fields break the schema."""
    path = Path(path)
    data = load_yaml(path)
    if not isinstance(data, dict):
        raise SpecError([f"{path}: expected a mapping at the top level, got {type(data).__name__}"])
    try:
        spec, problems, invalid = SweepSpec.model_validate(data), [], set()
    except ValidationError as e:
        problems, invalid = format_validation_error(e, SweepSpec), {err["loc"][0] for err in e.errors()}
        spec = SweepSpec.model_validate(
            {
                **{k: v for k, v in data.items() if k not in invalid},
                **{k: v for k, v in _PLACEHOLDERS.items() if k in invalid},
            }
        )
    spec = _absolutise(spec, path.resolve().parent)
    problems += check_references(spec, invalid)
    if problems:
        raise SpecError([f"{path}: {line}" for line in problems])
    return spec


#: valid stand-ins for required fields that break the schema, so that the valid fields' references are still
#: checked (every error is a field's: without its invalid fields the spec validates); check_references skips them
_PLACEHOLDERS = {"name": "invalid", "tasks": ["invalid"], "agents": ["invalid"], "models": ["invalid"], "budget": 1}


def _absolutise(spec: SweepSpec, base: Path) -> SweepSpec:
    """Relative paths in a sweep file are relative to the file, so the frozen copy works from anywhere."""

    def ab(p: str | None) -> str | None:
        if p is None or p.startswith((BUILTIN_PREFIX, "$")) or p == "sweep":  # resolved in the job
            return p
        return str((base / Path(p).expanduser()).resolve())

    def interpreter(p: str | None) -> str | None:  # not resolved: a venv's bin/python links out of the venv
        return p if p is None or p.startswith("$") else os.path.abspath(base / Path(p).expanduser())

    return spec.model_copy(
        update={
            "models": [m.model_copy(update={"path": ab(m.path)}) for m in spec.model_entries],
            "scratch_root": ab(spec.scratch_root),
            "data_root": ab(spec.data_root),
            "task_paths": [ab(p) for p in spec.task_paths],
            "agent_python": interpreter(spec.agent_python),
            "agent_paths": [ab(p) for p in spec.agent_paths],
            "grader": spec.grader.model_copy(
                update={"baseline_cache": ab(spec.grader.baseline_cache), "python": interpreter(spec.grader.python)}
            ),
            "local_drivers": {
                k: d.model_copy(update={"model": ab(d.model), "python": interpreter(d.python)})
                for k, d in spec.local_drivers.items()
            },
        }
    )


def check_references(spec: SweepSpec, invalid: set[str] = frozenset()) -> list[str]:
    """Names that must exist in the registries, and files that must exist. Checks that depend on a field in
    `invalid` (which broke the schema, so `spec` holds a default or a placeholder there) are skipped."""

    def valid(*fields: str) -> bool:
        return not invalid.intersection(fields)

    return (
        _check_tasks(spec, valid)
        + _check_agents(spec, valid)
        + _check_models(spec, valid)
        + _check_interpreters(spec, valid)
        + _check_cluster(spec)
    )


def _check_tasks(spec: SweepSpec, valid: Callable[..., bool]) -> list[str]:
    """Every task named exists, loads, and has its description, evaluator and prepare files."""
    from a2rl.spec.tasks import task_registry

    problems = []
    tasks = task_registry([Path(p) for p in spec.task_paths])
    known_tasks = tasks.names()
    for i, t in enumerate(spec.tasks if valid("tasks", "task_paths") else []):
        if t not in known_tasks:
            problems.append(f"tasks[{i}]: {unknown_name('task', t, known_tasks)}")
            continue
        try:
            task = tasks.get(t)
        except SpecError as e:
            problems += [f"tasks[{i}]: {line}" for line in e.lines]
            continue
        folder = tasks.path(t).parent
        for field in ("description", "evaluator", "prepare"):
            if not (folder / getattr(task, field)).is_file():
                problems.append(f"tasks[{i}]: task {t!r} has no {field} file {folder / getattr(task, field)}")
    return problems


def _check_agents(spec: SweepSpec, valid: Callable[..., bool]) -> list[str]:
    """Every agent named exists, takes its args, and supports each of its drivers."""
    from a2rl.spec.agents import agent_registry

    problems = []
    agents = agent_registry([Path(p) for p in spec.agent_paths])
    known_agents = agents.names()
    for i, a in enumerate(spec.agent_entries if valid("agents", "agent_paths") else []):
        if a.name not in known_agents:
            problems.append(f"agents[{i}]: {unknown_name('agent', a.name, known_agents)}")
            continue
        try:
            stack = agents.get(a.name)
            stack.check_args(a.args)
        except SpecError as e:
            problems += [f"agents[{i}].args: {line}" for line in e.lines]
            continue
        if not stack.needs_driver or not valid("drivers", "local_drivers"):
            continue
        for d in spec.drivers_of(a):
            local = local_driver_name(d)
            if local is None and not stack.supports(d):
                problems.append(
                    f"agents[{i}]: agent {a.name!r} does not support driver {d!r} "
                    f"(supports: {', '.join(stack.driver_families)})"
                )
            elif local is not None and local not in spec.local_drivers:
                problems.append(
                    f"agents[{i}]: driver {d!r} names no entry of local_drivers "
                    f"(defined: {', '.join(spec.local_drivers) or 'none'})"
                )
            elif local is not None and stack.openai_compatible is None:
                problems.append(
                    f"agents[{i}]: agent {a.name!r} cannot use local driver {d!r}: its stack declares "
                    f"no `openai_compatible` endpoint settings"
                )
    return problems


def _check_models(spec: SweepSpec, valid: Callable[..., bool]) -> list[str]:
    """The modes, the base models and their generation presets, the local drivers and the inspector's driver."""
    from a2rl.spec.agents import known_modes
    from a2rl.spec.generation import preset_registry

    modes = known_modes()
    presets = preset_registry().names()
    problems = [f"modes[{i}]: {unknown_name('mode', m, modes)}" for i, m in enumerate(spec.modes) if m not in modes]
    for i, m in enumerate(spec.model_entries if valid("models") else []):
        if err := check_model_ref(m.path):  # a directory's presence: scheduling/readiness.py, at launch
            problems.append(f"models[{i}].path: {err}")
        if m.generation not in presets:
            problems.append(f"models[{i}].generation: {unknown_name('generation preset', m.generation, presets)}")
    for name, d in spec.local_drivers.items():
        if not re.match(NAME, name):
            problems.append(f"local_drivers.{name}: a driver name may hold letters, digits, '_', '.' and '-'")
        if err := check_model_ref(d.model):
            problems.append(f"local_drivers.{name}.model: {err}")
        if d.backend == "vllm" and not (python := driver_python(d)).is_file():
            problems.append(
                f"local_drivers.{name}.python: no interpreter at {python} (build the vLLM environment "
                f"with tools/setup-vllm-env.sh, or set python / $A2RL_VLLM_PYTHON)"
            )
    if valid("inspector", "local_drivers") and spec.inspector and spec.inspector.driver:
        if spec.inspector.driver not in spec.local_drivers:
            problems.append(
                f"inspector.driver: {spec.inspector.driver!r} names no entry of local_drivers "
                f"(defined: {', '.join(spec.local_drivers) or 'none'})"
            )
    return problems


def _check_interpreters(spec: SweepSpec, valid: Callable[..., bool]) -> list[str]:
    """The task and agent directories, and the grader's and the agents' interpreters."""
    problems = []
    for field in ("task_paths", "agent_paths"):
        for i, p in enumerate(getattr(spec, field)):
            if not Path(p).is_dir():
                problems.append(f"{field}[{i}]: directory {p!r} does not exist")
    if valid("grader") and (python := grader_python(spec)) is not None and not python.is_file():
        problems.append(
            f"grader.python: no interpreter at {python} (build the vLLM environment with "
            f"tools/setup-vllm-env.sh, or set grader.python / $A2RL_VLLM_PYTHON)"
        )
    python = agent_python(spec)
    if not python.is_file():
        problems.append(
            f"agent_python: no interpreter at {python} (build the agents' environment with "
            f"tools/setup-agent-env.sh, or set agent_python / $A2RL_AGENT_PYTHON)"
        )
    return problems


def _check_cluster(spec: SweepSpec) -> list[str]:
    """The cluster profile named exists and loads (a bad profile fails at launch, not at submission)."""
    if spec.cluster is None:
        return []
    from a2rl.spec.clusters import cluster_registry

    if spec.cluster not in cluster_registry().names():
        return [f"cluster: {unknown_name('cluster profile', spec.cluster, cluster_registry().names())}"]
    try:
        cluster_registry().get(spec.cluster)
    except SpecError as e:
        return [f"cluster: {line}" for line in e.lines]
    return []
