"""The evaluator contract: what a task's evaluator module (task.yaml `evaluator`, evaluator.py by default) defines
and what the grader hands it, and how the grader loads and calls it. Task code imports only a2rl.tasklib and
a2rl.llm."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

from a2rl.errors import SpecError
from a2rl.tasklib.envs import load_module

if TYPE_CHECKING:
    from a2rl.llm.backends import Engine
    from a2rl.spec.generation import GenerationPreset
    from a2rl.spec.tasks import Task


class Policy(Protocol):
    """The graded model on the grader's engine: a2rl.llm.inference.Generator (transformers) or
    a2rl.llm.vllm_backend.VLLMGenerator. Render chat prompts with a2rl.llm.chat.policy_prompt."""

    tokenizer: Any
    preset: GenerationPreset  # the run's generation preset (greedy unless the sweep says otherwise)
    backend: str

    @property
    def config(self) -> Any: ...

    def generate(
        self,
        prompts: list[str],
        *,
        max_new_tokens: int,
        batch_size: int = 64,
        stop: str | Sequence[str] | None = "\n",
        add_special_tokens: bool = True,
    ) -> list[str]: ...

    def first_token_logprobs(
        self, prompts: list[str], *, top: int, batch_size: int = 16, add_special_tokens: bool = True
    ) -> list[list[tuple[str, float]]]: ...


class Evaluator(Protocol):
    """A task's evaluator module. `evaluate` scores the policy on the held-out split in `heldout_dir` and returns
    {"score": 0–100, ...details}. `options` is task.yaml's `eval` overridden by the sweep's task_options, with
    "protocol" ("paper" or "a2rl") and, when the grader sets one, "batch_size"."""

    def evaluate(self, generator: Policy, heldout_dir: Path, options: dict[str, Any]) -> dict[str, Any]: ...


class EngineEvaluator(Protocol):
    """An evaluator that serves a second model (a local judge) declares `engine` and gets the grader's engine."""

    def evaluate(
        self, generator: Policy, heldout_dir: Path, options: dict[str, Any], *, engine: Engine
    ) -> dict[str, Any]: ...


def load_evaluator(task: Task) -> ModuleType:
    """The task's evaluator module, executed anew (a long-lived grader runs the code on disk)."""
    path = task.folder / task.spec.evaluator
    if not path.is_file():
        raise SpecError([f"{path}: no such task module"])
    return load_module(path, f"a2rl_task_{task.name}_evaluator", fresh=True)


def evaluate(
    evaluator: Evaluator | EngineEvaluator,
    generator: Policy,
    heldout_dir: Path,
    options: dict[str, Any],
    engine: Engine,
    *,
    task: str,
) -> tuple[float, dict[str, Any]]:
    """Call `evaluator` as the contract says: the score (checked to lie in 0–100) and the details."""
    extra = {"engine": engine} if "engine" in inspect.signature(evaluator.evaluate).parameters else {}
    result = evaluator.evaluate(generator, heldout_dir, options, **extra)
    score = float(result["score"])
    if not 0.0 <= score <= 100.0:
        raise ValueError(f"evaluator of {task!r} returned score {score}, outside 0–100")
    return score, {k: v for k, v in result.items() if k != "score"}
