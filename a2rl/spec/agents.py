"""Agent stacks (YAML under configs/agents/): how each agent CLI is started, what it needs, and the prompt modes."""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, field_validator

from a2rl.errors import SpecError
from a2rl.records import atomic_write_text
from a2rl.spec.registry import HOME, Registry

PROMPTS = HOME / "configs" / "prompts"  # <mode>.md: the instruction text of each prompt mode
FREE = "free"  # the default mode, whose text adds nothing to a run's id
KICKOFF = (
    "Read {file} in your working directory: it describes the task, the rules and how to submit. "
    "Then work on the task until your budget ends, submitting each model worth scoring."
)


class OpenAICompatible(BaseModel):
    """How a stack is pointed at a local driver's server, which speaks every vendor protocol (Chat Completions,
    Responses, Anthropic Messages, Gemini): the driver string its CLI gets and the variables that carry the
    endpoint (env_flags turn them into flags for CLIs that take flags). Templates: {model} (the served name),
    {base_url} (`http://HOST:PORT/v1`), {root} (`http://HOST:PORT`, for CLIs that add `/v1` themselves), {api_key}."""

    model_config = ConfigDict(extra="forbid")
    model: str = "{model}"
    env: dict[str, str]

    def render(self, *, model: str, base_url: str, api_key: str) -> tuple[str, dict[str, str]]:
        values = {"model": model, "base_url": base_url, "root": base_url.removesuffix("/v1"), "api_key": api_key}
        return self.model.format(**values), {k: v.format(**values) for k, v in self.env.items()}


class Install(BaseModel):
    """Where a stack's CLI comes from, pinned: `tools/agents/install.sh` installs exactly this."""

    model_config = ConfigDict(extra="forbid")
    npm: str | None = None  # an npm package, installed into the CLI prefix ($A2RL_AGENT_CLIS)
    pip: str | None = None  # a pip requirement, installed into its own venv under the prefix
    version: str
    python: str | None = None  # the venv's Python version where the package needs one (openhands: 3.12)

    def command(self, stack: str) -> str:
        return f"tools/agents/install.sh {stack}"


class AgentStack(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    description: str = ""
    # argv; placeholders: {python} (the agents' interpreter, the sweep's agent_python), {workspace}, {driver}, {seed}
    # (the run's), {stack_dir} (this YAML's folder), {prompt} (the kick-off prompt pointing at the instructions file),
    # {cli_dir} (the folder `cli` was found in: a pip stack's venv bin/, whose python runs a module of it)
    command: list[str]
    cli: str | None = None  # the installed program that shows the stack is there; None: command[0]
    args: dict[str, Any] = {}  # defaults, rendered as --key value; a sweep may override known keys
    needs_driver: bool = False
    # a control (`baseline`): submits nothing by design, so its runs report the base model and are no failure
    control: bool = False
    # driver families this stack can use, as globs over the driver name (`claude-*`); empty: any driver
    driver_families: list[str] = []
    driver_env: str | None = None  # a variable that carries the driver to CLIs that read it from the environment
    passthrough_env: list[str] = []  # launcher variables the agent may see (nothing else leaks through)
    env: dict[str, str] = {}  # fixed variables the CLI needs ({stack_dir} expands), e.g. IS_SANDBOX=1
    # settings files a2rl writes into the run's private HOME before the CLI starts (path under HOME → JSON
    # content): a CLI trusts its own HOME, never a file under the checkout (gemini refuses a settings file
    # whose parent is writable by others, as a checkout under /tmp or a group project directory is)
    home_files: dict[str, dict[str, Any]] = {}
    # argv added where a variable of the agent's environment is set ({value}: its value): settings a CLI takes
    # only as flags
    env_flags: dict[str, list[str]] = {}
    install: Install | None = None  # None: the command needs no installing (python, true)
    # launcher variables the CLI needs (API keys): checked at launch, passed through; an entry that is a list
    # is satisfied by any one of its variables
    credentials: list[str | list[str]] = []
    # files a CLI login leaves under HOME (~/.claude/.credentials.json): with the sweep's `agent_logins`, one
    # that exists satisfies the credentials and is mounted read-only at the same place in the workspace's HOME
    login_files: list[str] = []
    # directories searched for the CLI after this installation's bin/ and before the system's; `$VARS` and `~`
    # expand in the job, and an entry whose variable is unset is dropped
    path: list[str] = []
    instructions_file: str | None = None  # read by the CLI from its working directory (CLAUDE.md, AGENTS.md ...)
    transcript: Literal["none", "claude", "codex", "gemini", "opencode", "openhands", "litellm"] = "none"
    # files under the agent's HOME (globs) where the CLI keeps what its parser reads besides its output
    # (OpenHands' conversation state): read with the log when the result is written
    transcript_files: list[str] = []
    openai_compatible: OpenAICompatible | None = None  # None: the stack cannot use local drivers
    # the agent writes $OUTPUT_DIR/stages.json (a2rl.store.stages): copied for the run report, as self-reported
    stage_records: bool = False

    @field_validator("home_files")
    @classmethod
    def _inside_home(cls, files: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        bad = [f for f in files if Path(f).is_absolute() or ".." in Path(f).parts]
        if bad:
            raise ValueError(f"home_files paths must be relative and stay under HOME: {bad}")
        return files

    def write_home_files(self, home: Path) -> None:
        for rel, content in self.home_files.items():
            (home / rel).parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(home / rel, json.dumps(content, indent=2) + "\n")

    def supports(self, driver: str) -> bool:
        return not self.driver_families or any(fnmatch.fnmatchcase(driver, g) for g in self.driver_families)

    def credential_vars(self) -> list[str]:
        return [name for entry in self.credentials for name in ([entry] if isinstance(entry, str) else entry)]

    def logins(self, home: Path) -> list[Path]:
        """The login files present under `home` (the launcher's)."""
        return [home / f for f in self.login_files if (home / f).is_file()]

    def missing_credentials(
        self, environ: dict[str, str], local_driver: bool = False, logins: bool = False
    ) -> list[str]:
        """Credentials the launcher lacks ("A or B" for alternatives); with a local driver, those its endpoint
        variables provide are not needed (the sweep's server hands out its own key); with `logins`, none are
        where a login file exists."""
        if logins and self.logins(Path(environ.get("HOME") or Path.home())):
            return []
        given = set(self.openai_compatible.env) if local_driver and self.openai_compatible else set()
        missing = []
        for entry in self.credentials:
            names = [entry] if isinstance(entry, str) else entry
            if not any(environ.get(n) or n in given for n in names):
                missing.append(" or ".join(names))
        return missing

    def search_dirs(self) -> list[str]:
        """`path`, expanded here; entries whose variable is unset are dropped."""
        dirs = [os.path.expanduser(os.path.expandvars(d)) for d in self.path]
        return [d for d in dirs if "$" not in d]

    @property
    def cli_name(self) -> str:
        return self.cli or self.command[0]

    def find_cli(self, environ: dict[str, str]) -> str | None:
        """The CLI this stack runs (`cli` or command[0]) as the job will find it: in `path`, then on PATH."""
        return shutil.which(self.cli_name, path=os.pathsep.join([*self.search_dirs(), environ.get("PATH", "")]))

    def agent_env(self, base: dict[str, str], driver: str, stack_dir: Path) -> dict[str, str]:
        """`base` (agent_env's) with this stack's directories on PATH, its fixed variables and its driver
        variable."""
        env = dict(base)
        env.update({k: v.format(stack_dir=stack_dir) for k, v in self.env.items()})
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
            raise SpecError(
                [
                    f"unknown argument(s) {unknown} for agent {self.name!r} "
                    f"(known: {', '.join(sorted(self.args)) or 'none'})"
                ]
            )

    def argv(
        self,
        overrides: dict[str, Any],
        *,
        workspace: Path,
        driver: str,
        seed: int,
        stack_dir: Path,
        python: Path,
        env: dict[str, str] | None = None,
    ) -> list[str]:
        subst = {
            "python": str(python),
            "workspace": str(workspace),
            "driver": driver,
            "seed": seed,
            "stack_dir": str(stack_dir),
            "prompt": KICKOFF.format(file=self.instructions_file or "../instructions.md"),
        }
        env = env or {}
        if any("{cli_dir}" in part for part in self.command):
            found = self.find_cli(env)
            if found is None:
                raise SpecError(
                    [
                        f"agent {self.name!r}: `{self.cli_name}` is not installed; run "
                        f"`{self.install.command(self.name) if self.install else 'its installer'}`"
                    ]
                )
            subst["cli_dir"] = os.path.dirname(found)
        extra = [
            part.format(value=env[name]) for name, parts in self.env_flags.items() if env.get(name) for part in parts
        ]
        return [part.format(**subst) for part in self.command] + extra + cli_flags({**self.args, **overrides})


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
