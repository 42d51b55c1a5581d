"""Sections of the sweep spec (spec/sweep.py) with their own settings: a local driver, code recording, the
inspector and a run's caps; and Strict, the base of every section (unknown keys and wrong types are errors)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class LocalDriver(Strict):
    """An open-weight driver LLM served by a job of the sweep behind an OpenAI-compatible API (a2rl/drivers/);
    runs use it as driver `local:<name>`."""

    model: str  # a directory, or builtin:NAME
    backend: Literal["vllm", "transformers"] = "vllm"  # transformers: a2rl's own server (CPU, small models)
    served_name: str | None = None  # the model name agents ask for; default: the driver's name
    cpus: int = Field(4, ge=1)
    gpus: int = Field(1, ge=0)
    mem_gb: float = Field(64, gt=0)
    args: dict[str, Any] = {}  # further `vllm serve` options, e.g. {max_model_len: 32768}
    python: str | None = None  # backend vllm: the interpreter vLLM's server runs in; default: vllm_python()
    startup_timeout_s: float = Field(
        1800, gt=0
    )  # a run waits this long for the server (set-up: before the budget starts)


class RecordingSettings(Strict):
    """Code snapshots taken at each submission, and the workspace archived after the run (see a2rl/recording/)."""

    max_file_mb: float = Field(1, gt=0)  # larger files are skipped (and listed as skipped)
    max_total_mb: float = Field(50, gt=0)  # per snapshot; files past it are skipped
    exclude: list[str] = [".git", "__pycache__", ".venv", "wandb", "*.safetensors", "*.bin", "*.pt"]
    # after the run, workspaces outside the sweep directory (node-local scratch) are copied into it
    archive_workspace: bool = True
    workspace_max_file_mb: float = Field(20, gt=0)
    workspace_max_mb: float = Field(200, gt=0)
    # an interrupted run's code/, output/ (weights included) and home/, saved in the sweep directory for a
    # requeue on another node; files past this total are skipped, output/ last
    resume_max_mb: float = Field(50_000, gt=0)
    # new file contents all of a run's snapshots may store together; past it, files are skipped (listed)
    max_run_mb: float = Field(500, gt=0)


class InspectorSettings(Strict):
    """`inspector:` the LLM judge that reads each run when it ends (a2rl/inspector/; `a2rl inspect` runs it by
    hand): exactly one of an endpoint (`base_url` and `model`; `api` openai for Chat Completions, anthropic for
    Messages) or `driver`, a local_drivers entry of this sweep. Its verdicts never change a score."""

    api: Literal["openai", "anthropic"] = "openai"
    base_url: str | None = None  # e.g. https://api.anthropic.com/v1
    model: str | None = None
    api_key_env: str | None = None  # the variable holding the key (sent only to base_url)
    driver: str | None = None  # a local_drivers name: the sweep's own model judges
    timeout_s: float = Field(300, gt=0)
    retries: int = Field(2, ge=0)
    max_tokens: int = Field(2048, ge=16)  # the judge's answer
    max_input_chars: int = Field(200_000, ge=2000)  # the run's material past this is cut (recorded as truncated)
    output_chars: int = Field(400, ge=40)  # each tool output is cut to this (its head and tail)
    # USD per million tokens, for the judge's cost; unset: the cost stays unknown (no pricing table is guessed)
    usd_per_mtok_in: float | None = Field(None, ge=0)
    usd_per_mtok_out: float | None = Field(None, ge=0)

    @model_validator(mode="after")
    def _one_judge(self) -> InspectorSettings:
        endpoint = self.base_url is not None or self.model is not None
        if (self.driver is not None) == endpoint:
            raise ValueError("the inspector needs exactly one judge: base_url and model, or driver")
        if endpoint and not (self.base_url and self.model):
            raise ValueError("an inspector endpoint needs both base_url and model")
        return self


class StorageSettings(Strict):
    """`storage:` what one run may leave in the sweep directory (recording/diskuse.py measures it): its frozen
    submissions, its code snapshots (their blobs counted once per run), its run directory. A submission that
    would take the run past `run_gb` is refused with a JSON error (HTTP 507), nothing enqueued."""

    # GiB per run; default: follows the base model's size (spec/sizing.py storage_default_gb)
    run_gb: float | None = Field(None, gt=0)
    # candidates: after each grading, delete the run's frozen copies that grader.final can no longer pick
    # (grading/retention.py); all: keep every frozen copy (as grader.keep_artifacts: true does)
    keep: Literal["candidates", "all"] = "candidates"


class RunLimits(Strict):
    """What one run may consume (run/caps.py), sized for the paper's 7-8B runs; a cap hit is named in agent.log
    and in the run's result (`caps_hit`). docs/isolation.md "Caps" lists how each is enforced."""

    processes: int = Field(4096, ge=16)  # tasks (processes and threads) in the agent's sandbox
    # bytes under the workspace; past it the run stops with status quota. Default: follows the base model's
    # size (spec/sizing.py workspace_default_gb: a full checkpoint with fp32 Adam state, plus room for data)
    workspace_gb: float | None = Field(None, gt=0)
    workspace_check_s: float = Field(30, gt=0)  # how often the workspace is measured
    agent_log_mb: float = Field(512, gt=0)  # agent.log past this is cut, with a marker
    # memory of the agent's process tree (on Slurm the job's --mem cgroup holds it as well); default
    # resources.mem_gb
    mem_gb: float | None = Field(None, gt=0)
    relay_connections: int = Field(64, ge=1)  # open connections per network relay of the sandbox
