"""Scoring a model on a task's held-out items, and what fixes a score: the evaluation the grader, the baselines
and the test harnesses share (no queue, no ledger)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from a2rl.llm.backends import CPU_SETTINGS, BackendSettings, Engine, EngineKey
from a2rl.llm.contextcap import ContextCap
from a2rl.spec.generation import GenerationPreset, get_preset
from a2rl.spec.tasks import DEFAULT_PROTOCOL, Part, Task
from a2rl.tasklib.evaluator import evaluate as run_evaluator
from a2rl.tasklib.evaluator import load_evaluator


def evaluate_model(
    task: Task,
    model_dir: Path,
    tokenizer_dir: Path,
    *,
    data_root: Path,
    protocol: str = DEFAULT_PROTOCOL,
    batch_size: int | None = None,
    options: dict | None = None,
    engine: Engine | None = None,
    preset: GenerationPreset | None = None,
    part: Part = "heldout",
) -> tuple[float, dict]:
    """Score one model on the task's held-out split under `protocol` (the run's, never an option a sweep's
    task_options could set apart from the run id and the ledger) with the engine's backend (without one: a
    transformers engine on CPU, for this call). `part`: all held-out items, or one side of the split
    (`feedback: split`). An evaluator that serves a second model (localjudge's judge) declares an `engine`
    parameter and gets the engine."""
    options = {**task.spec.eval, **(options or {}), "protocol": protocol}
    if batch_size:
        options["batch_size"] = batch_size
    preset = preset or get_preset()
    engine = engine or Engine(CPU_SETTINGS)
    generator = engine.get(model_dir, tokenizer_dir, preset)
    cap = generator.context_cap = ContextCap()  # this evaluation's: the generator serves many
    score, details = run_evaluator(
        load_evaluator(task), generator, task.data(data_root).part_dir(part), options, engine, task=task.name
    )
    if (bit := cap.record()) is not None:  # new tokens were capped at the model's context: the ledger says so
        details["context_cap"] = bit
    return score, details


def n_items(task: Task, part: Part, details: dict) -> int | None:
    """How many held-out items stand behind a score: the split's size for a part, else the evaluator's `n`."""
    split = task.spec.split
    if part != "heldout" and split is not None:
        return split.feedback if part == "feedback" else split.final
    n = details.get("n")
    return n if isinstance(n, int) else None


def grading_key(
    digest: str,
    model: EngineKey,
    task: Task,
    protocol: str,
    settings: BackendSettings,
    preset: GenerationPreset,
    options: dict | None,
    part: Part = "heldout",
) -> str:
    """What fixes a submission's score: its weights, architecture (config) and tokenizer, the task, evaluator
    version and protocol, the backend settings, the preset, the task options and the part of the held-out
    items (named only when not all of them: older keys stay valid). Equal keys, equal scores (the grading
    cache)."""
    return hashlib.sha256(
        json.dumps(
            ([part] if part != "heldout" else [])
            + [
                digest,
                model.__dict__,
                task.name,
                task.spec.evaluator_version,
                protocol,
                settings.record(),
                preset.record(),
                options or {},
            ],
            sort_keys=True,
            default=str,
        ).encode()
    ).hexdigest()
