"""Run specs: one per cell of the sweep grid, with a stable id from (task, agent, driver, model, mode, protocol,
seed)."""

from __future__ import annotations

import re
from pathlib import Path

from a2rl.records import Record
from a2rl.spec.agents import FREE, agent_registry
from a2rl.spec.sweep import AgentEntry, ModelEntry, SweepSpec
from a2rl.spec.tasks import DEFAULT_PROTOCOL, EvalProtocol


class RunSpec(Record):
    run_id: str
    task: str
    agent: AgentEntry
    driver: str
    mode: str = FREE
    model: ModelEntry
    protocol: EvalProtocol = DEFAULT_PROTOCOL  # how the grader scores the run's submissions and baseline
    seed: int
    budget_s: float


def run_id(
    task: str, agent: str, driver: str, model: str, seed: int, mode: str = FREE, protocol: str = DEFAULT_PROTOCOL
) -> str:
    """The mode and the protocol join the id only when they are not the default, so ids from before they
    existed stay valid. A driver's `/` (provider/model) and other characters unsafe in a directory name
    become `-`."""
    driver = re.sub(r"[^A-Za-z0-9_.-]", "-", driver)
    extra = "".join(f"{x}__" for x, default in ((mode, FREE), (protocol, DEFAULT_PROTOCOL)) if x != default)
    return f"{task}__{agent}__{driver}__{model}__{extra}s{seed}"


def expand(spec: SweepSpec) -> list[RunSpec]:
    """The cartesian product, in a stable order. Agents that take no driver LLM run once, with driver 'none' and
    the free mode (prompt modes are instructions to an LLM)."""
    agents = agent_registry([Path(p) for p in spec.agent_paths])
    runs = []
    for task in spec.tasks:
        for agent in spec.agent_entries:
            driven = agents.get(agent.name).needs_driver
            for driver in spec.drivers_of(agent) if driven else ["none"]:
                for mode in spec.modes if driven else [FREE]:
                    for model in spec.model_entries:
                        for protocol in spec.protocols:
                            for seed in spec.seeds:
                                runs.append(
                                    RunSpec(
                                        run_id=run_id(task, agent.key, driver, model.name, seed, mode, protocol),
                                        task=task,
                                        agent=agent,
                                        driver=driver,
                                        mode=mode,
                                        model=model,
                                        protocol=protocol,
                                        seed=seed,
                                        budget_s=spec.budget,
                                    )
                                )
    return runs
