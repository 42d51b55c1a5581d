"""Agent stacks (YAML under configs/agents/): how each agent CLI is started, what it needs, and the prompt modes."""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from a2rl.errors import SpecError
from a2rl.spec.registry import HOME, Registry

PROMPTS = HOME / "configs" / "prompts"  # <mode>.md: the instruction text of each prompt mode
FREE = "free"  # the default mode, whose text adds nothing to a run's id
KICKOFF = ("Read {file} in your working directory: it describes the task, the rules and how to submit. "
           "Then work on the task until your budget ends, submitting each model worth scoring.")


class OpenAICompatible(BaseModel):
    """How a stack is pointed at a local driver's server, which speaks every vendor protocol (Chat Completions,
    Responses, Anthropic Messages, Gemini): the driver string its CLI gets, the variables that carry the endpoint
    and flags added to its command line. Templates: {model} (the served name), {base_url}
    (`http://HOST:PORT/v1`), {root} (`http://HOST:PORT`, for CLIs that add `/v1` themselves), {api_key}."""
    model_config = ConfigDict(extra="forbid")
    model: str = "{model}"
    env: dict[str, str]
    args: list[str] = []

    def render(self, *, model: str, base_url: str, api_key: str) -> tuple[str, dict[str, str], list[str]]:
        values = {"model": model, "base_url": base_url, "root": base_url.removesuffix("/v1"), "api_key": api_key}
        return (self.model.format(**values), {k: v.format(**values) for k, v in self.env.items()},
                [a.format(**values) for a in self.args])


class AgentStack(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    description: str = ""
    # argv; placeholders: {python} (the agents' interpreter, the sweep's agent_python), {workspace}, {driver}, {seed} (the run's),
    # {stack_dir} (this YAML's folder), {prompt} (the kick-off prompt pointing at the instructions file)
    command: list[str]
    args: dict[str, Any] = {}  # defaults, rendered as --key value; a sweep may override known keys
    needs_driver: bool = False
    # driver families this stack can use, as globs over the driver name (`claude-*`); empty: any driver
    driver_families: list[str] = []
    driver_env: str | None = None  # a variable that carries the driver to CLIs that read it from the environment
    passthrough_env: list[str] = []  # launcher variables the agent may see (nothing else leaks through)
    credentials: list[str] = []  # launcher variables the CLI needs (API keys): checked at launch, passed through
    # directories searched for the CLI after this installation's bin/ and before the system's; `$VARS` and `~`
    # expand in the job, and an entry whose variable is unset is dropped
    path: list[str] = []
    instructions_file: str | None = None  # read by the CLI from its working directory (CLAUDE.md, AGENTS.md ...)
    transcript: Literal["none", "claude", "codex", "gemini", "opencode", "openhands", "litellm"] = "none"
    openai_compatible: OpenAICompatible | None = None  # None: the stack cannot use local drivers

    def supports(self, driver: str) -> bool:
        return not self.driver_families or any(fnmatch.fnmatchcase(driver, g) for g in self.driver_families)

    def missing_credentials(self, environ: dict[str, str], local_driver: bool = False) -> list[str]:
        """Credentials the launcher lacks; with a local driver, those its endpoint variables provide are not
        needed (the sweep's server hands out its own key)."""
        given = set(self.openai_compatible.env) if local_driver and self.openai_compatible else set()
        return [name for name in self.credentials if not environ.get(name) and name not in given]

    def search_dirs(self) -> list[str]:
        """`path`, expanded here; entries whose variable is unset are dropped."""
        dirs = [os.path.expanduser(os.path.expandvars(d)) for d in self.path]
        return [d for d in dirs if "$" not in d]

    def env(self, base: dict[str, str], driver: str) -> dict[str, str]:
        """`base` (agent_env's) with this stack's directories on PATH and its driver variable."""
        env = dict(base)
        dirs = self.search_dirs()
        if dirs:
            first, _, rest = env["PATH"].partition(":")  # first: this installation's bin/ (python, a2rl)
            env["PATH"] = ":".join([first, *dirs, rest])
        if self.driver_env:
            env[self.driver_env] = driver
        return env

    def check_args(self, overrides: dict[str, Any]) -> None:
        unknown = sorted(set(overrides) - set(self.args))
        if unknown:
            raise SpecError([f"unknown argument(s) {unknown} for agent {self.name!r} "
                             f"(known: {', '.join(sorted(self.args)) or 'none'})"])

    def argv(self, overrides: dict[str, Any], *, workspace: Path, driver: str, seed: int,
             stack_dir: Path, python: Path, endpoint_args: list[str] = ()) -> list[str]:
        """The command line; endpoint_args: a local driver's flags (OpenAICompatible.args), after the command."""
        subst = {"python": str(python), "workspace": str(workspace), "driver": driver, "seed": seed,
                 "stack_dir": str(stack_dir), "prompt": KICKOFF.format(file=self.instructions_file or
                                                                       "../instructions.md")}
        return [part.format(**subst) for part in self.command] + list(endpoint_args) + \
            cli_flags({**self.args, **overrides})


def cli_flags(options: dict[str, Any]) -> list[str]:
    """{max_steps: 3, fast: true, skip: null} → --max-steps 3 --fast (false and null leave the flag out)."""
    argv: list[str] = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif value is not False and value is not None:  # not `in (False, None)`: 0 == False
            argv += [flag, str(value)]
    return argv


def known_modes() -> list[str]:
    return sorted(p.stem for p in PROMPTS.glob("*.md"))


def mode_text(mode: str) -> str:
    return (PROMPTS / f"{mode}.md").read_text().strip()


def agent_registry(extra_dirs: list[Path] = ()) -> Registry[AgentStack]:
    return Registry(AgentStack, "agent", HOME / "configs" / "agents", "A2RL_AGENTS_PATH").with_dirs(list(extra_dirs))
