"""What a launch refuses on the machine it runs on, beyond the sweep file itself (spec/sweep.py checks that): the
credentials the launcher gives, the agent CLIs it installs, the model directories, the tasks' prepared data and
the isolation. One list for both commands: `a2rl launch` refuses a sweep while any item has a problem
(launcher.py, open_sweep), before it writes or submits anything; `a2rl validate` prints every item, as errors
on the launching machine, or, with --elsewhere, as what launch will check there.

Launch checks the isolation here on the launching node; the audit probe (run/audit.py) then tries it as a run
starts its agent."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from a2rl.errors import SpecError
from a2rl.run.isolation import SandboxError, choose
from a2rl.spec.agents import agent_registry
from a2rl.spec.models import default_data_root, model_dir_problem
from a2rl.spec.sweep import SweepSpec, local_driver_name
from a2rl.spec.tasks import get_task
from a2rl.tasklib.prepare import unpreparable


@dataclass(frozen=True)
class Item:
    """One check of the list: its name and what it found (nothing: launch accepts it)."""

    name: str
    problems: list[str]


def credential_problems(spec: SweepSpec) -> list[str]:
    """Credentials are the launcher's to give: a missing one fails here, not hours later in a queued job."""
    agents = agent_registry([Path(p) for p in spec.agent_paths])
    problems = []
    for i, a in enumerate(spec.agent_entries):
        stack = agents.get(a.name)
        drivers = spec.drivers_of(a) if stack.needs_driver else ["none"]
        missing = {
            name
            for d in drivers
            for name in stack.missing_credentials(
                dict(os.environ), local_driver_name(d) is not None, logins=spec.agent_logins
            )
        }
        problems += [f"agents[{i}]: agent {a.name!r} needs {name}, which is not set" for name in sorted(missing)]
    return problems


def cli_problems(spec: SweepSpec) -> list[str]:
    """The agent CLIs are the launcher's to install (the jobs run the installed one)."""
    agents = agent_registry([Path(p) for p in spec.agent_paths])
    problems = []
    for i, a in enumerate(spec.agent_entries):
        stack = agents.get(a.name)
        if stack.install is not None and stack.find_cli(dict(os.environ)) is None:
            problems.append(
                f"agents[{i}]: agent {a.name!r} runs `{stack.cli_name}`, which is not installed in "
                f"{', '.join(stack.search_dirs()) or 'its path'} or on PATH: install it with "
                f"`{stack.install.command(a.name)}`"
            )
    return problems


def model_problems(spec: SweepSpec) -> list[str]:
    """Model directories that are not there (built-in models are built at launch, offline)."""
    problems = [f"models[{i}].path: {e}" for i, m in enumerate(spec.model_entries) if (e := model_dir_problem(m.path))]
    drivers = spec.local_drivers.items()
    return problems + [f"local_drivers.{k}.model: {e}" for k, d in drivers if (e := model_dir_problem(d.model))]


def data_problems(spec: SweepSpec) -> list[str]:
    """Tasks whose engines are missing, or whose data is not prepared and cannot be prepared offline at launch."""
    data_root = Path(spec.data_root) if spec.data_root else default_data_root()
    problems = []
    for name in spec.tasks:
        task = get_task(name, [Path(p) for p in spec.task_paths])
        try:
            task.check_engines()
        except SpecError as e:
            problems += e.lines
        if problem := unpreparable(task, data_root):
            problems.append(problem)
    return problems


def isolation_problems(spec: SweepSpec) -> list[str]:
    """The sweep's isolation on this node (run/isolation.py chooses it, as each run does)."""
    try:
        choose(spec.isolation, spec.network)
    except SandboxError as e:
        return [str(e)]
    return []


CHECKS: tuple[tuple[str, Callable[[SweepSpec], list[str]]], ...] = (
    ("credentials", credential_problems),
    ("agent CLIs", cli_problems),
    ("models", model_problems),
    ("prepared data", data_problems),
    ("isolation", isolation_problems),
)


def readiness(spec: SweepSpec) -> list[Item]:
    return [Item(name, check(spec)) for name, check in CHECKS]


def refuse_unready(spec: SweepSpec) -> None:
    """Raise SpecError with every problem of the list (what `a2rl launch` refuses)."""
    if problems := [p for item in readiness(spec) for p in item.problems]:
        raise SpecError(problems)
