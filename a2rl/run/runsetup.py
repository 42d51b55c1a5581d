"""A run's set-up, everything before its clock starts: the task (its data prepared), the base model, the agent
stack and its interpreter, a fresh workspace; and how the agent is started in its sandbox (environment, command).
The run's job (job.py, which then restores a resumed workspace, writes the instructions and waits for a local
driver before starting the clock) and `a2rl audit` (audit.py, which probes exactly what a run's agent gets) both
start from here."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from a2rl.run.sandbox import AgentSandbox, with_link_targets
from a2rl.run.workspace import Workspace, agent_env, create_workspace, linked_files
from a2rl.spec.agents import AgentStack, agent_registry
from a2rl.spec.grid import RunSpec
from a2rl.spec.registry import HOME
from a2rl.spec.sweep import agent_python
from a2rl.spec.tasks import Task, get_task
from a2rl.store.modeldirs import resolve_model
from a2rl.store.sweepdir import SweepDir
from a2rl.tasklib.prepare import ensure_prepared


@dataclass(frozen=True)
class RunSetup:
    task: Task
    model_dir: Path
    ws: Workspace
    stack: AgentStack
    stack_dir: Path  # the stack's folder (configs/agents/ or an agent_paths entry)
    python: Path  # the agents' interpreter


def set_up(sweep: SweepDir, run: RunSpec, root: Path) -> RunSetup:
    """The task with its data prepared, the base model (built if built-in), the workspace at `root`, the stack."""
    spec = sweep.spec
    task = get_task(run.task, [Path(p) for p in spec.task_paths])
    data = ensure_prepared(task, sweep.data_root())
    model_dir = resolve_model(run.model.path)
    ws = create_workspace(
        root,
        task=task,
        data=data,
        model_dir=model_dir,
        budget_s=run.budget_s,
        source_tree=HOME,
        protocol=run.protocol,
        final=spec.grader.final,
    )
    agents = agent_registry([Path(p) for p in spec.agent_paths])
    return RunSetup(
        task, model_dir, ws, agents.get(run.agent.name), agents.path(run.agent.name).parent, agent_python(spec)
    )


def agent_environment(
    box: AgentSandbox,
    stack: AgentStack,
    ws: Workspace,
    run: RunSpec,
    *,
    cpus: int,
    url: str,
    driver: str,
    python: Path,
    endpoint_env: dict[str, str],
    stack_dir: Path,
) -> dict[str, str]:
    """The agent's whole environment (shared with `a2rl audit`, which probes exactly what a run gets)."""
    env = stack.agent_env(
        agent_env(
            ws,
            task=run.task,
            protocol=run.protocol,
            model_name=run.model.name,
            url=url,
            cpus=cpus,
            passthrough=[*stack.passthrough_env, *stack.credential_vars()],
            python=python,
        ),
        driver,
        stack_dir,
    )
    env.update(endpoint_env)
    env.update(box.env)
    stack.write_home_files(Path(env["HOME"]))  # the run's private HOME (agent_env made it)
    return env


def agent_command(
    box: AgentSandbox,
    stack: AgentStack,
    argv: list[str],
    ws: Workspace,
    *,
    python: Path,
    stack_dir: Path,
    model_dir: Path,
    files: dict[Path, Path] | None = None,
) -> list[str]:
    """`argv` inside the run's sandbox, with what it may read (shared with `a2rl audit`); `files`: login files
    bound read-only into its HOME."""
    return box.command(
        argv,
        workspace=ws.root,
        python=python,
        cwd=ws.code,
        files=files,
        read_only=[stack_dir, *with_link_targets([model_dir, *map(Path, stack.search_dirs())]), *linked_files(ws)],
    )
