"""Tasks: a folder under tasks/ with task.yaml, the agent's description.md, a prepare script and an evaluator.

Prepared data lives under a data root, split in two: `train/` (copied into workspaces) and `heldout/`
(read only by the grader, never linked from a workspace). `heldout/CANARY` holds a random string written with
the data: found in a transcript, code or a submission, it shows held-out data reached the agent (tasklib/leaks.py);
the run's job reads it too (outside the sandbox) to search the weights for it as it freezes them (run/onecopy.py).
This module describes a task and reads the records of its data; tasklib/prepare.py runs the prepare script and
tasklib/evaluator.py loads the evaluator.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from a2rl.errors import SpecError
from a2rl.records import Record, RecordError
from a2rl.spec.registry import HOME, PACKAGE, Registry

CANARY = "CANARY"  # under heldout/; evaluators read their own files by name, never every file there
# How a task is scored: `paper` reproduces the reference implementation's evaluation (numbers comparable with
# the paper's Table 2, its quirks included); `a2rl` is ours with its bugs fixed. Evaluators get it as
# options["protocol"]; a task with one way of scoring ignores it.
PROTOCOLS = ("paper", "a2rl")
EvalProtocol = Literal[
    "paper", "a2rl"
]  # how a task is scored (the wire protocols of driver LLMs: drivers/protocols.py)
DEFAULT_PROTOCOL = "paper"

# What a task's train rows are, declared in task.yaml and told to agents in run_meta.json:
#   qa_short               {"prompt", "answer"}: the answer is the first line after the prompt (arith)
#   qa_numeric             {"question", "answer"}: a worked rationale ending "#### <number>" (gsm8k)
#   code_with_tests        {"prompt", "canonical_solution", "test", "entry_point"}: a function to complete (humaneval)
#   instruction_reference  {"instruction", "reference" (or Alpaca's "output", with an optional "input")}: judged
#   env_trajectories       an environment (env.py) and expert trajectories through it (interactive tasks)
TrainFormat = Literal["qa_short", "qa_numeric", "code_with_tests", "instruction_reference", "env_trajectories"]

# Which held-out items answer a submission (per task and protocol, task.yaml `feedback`): `heldout`, all of them
# (the paper's way; the run's number is its best answer on the items that gave the feedback); `split`, the
# feedback part only, and after the run the grader scores the run's selected submission once on the final part,
# which no answer to the agent ever drew on. `paper` is always `heldout`.
FeedbackMode = Literal["heldout", "split"]
# A part of the held-out data: all of it, or one side of its secret split (TaskData.part_dir)
Part = Literal["heldout", "feedback", "final"]
PARTS_DIR = "heldout-parts"  # beside heldout/, made by prepare for tasks with a `split`


class SplitSpec(BaseModel):
    """How prepare divides the held-out items of `file` (a JSONL file under heldout/, one item a line) for
    `feedback: split`: `feedback` and `final` items, drawn with a secret seed of the data root's."""

    model_config = ConfigDict(extra="forbid")
    file: str = "test.jsonl"
    feedback: int = Field(ge=1)
    final: int = Field(ge=1)


class TaskSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    level: Literal[1, 2, 3]
    kind: Literal["rule", "judge", "interactive"]
    evaluator_version: int
    description: str = "description.md"
    evaluator: str = "evaluator.py"
    prepare: str = "prepare.py"
    offline: bool = False  # prepare needs no network: a2rl may run it on demand
    train_files: list[str]
    # Large public train files: linked into workspaces (not copied) and bound read-only into the agent's sandbox.
    train_links: list[str] = []
    train_format: TrainFormat
    eval: dict[str, Any] = {}
    heldout_size: int | None = Field(None, ge=1)  # examples the grader scores: the capacity plan's before prepare
    # modules its prepare/evaluator need from the `games` extra (TextWorld, ALFWorld: their engines compile from
    # source, so the default set-up leaves them out); missing, the task's data and grading refuse in one line
    engines: list[str] = []
    split: SplitSpec | None = None  # sizes of the feedback and final parts (needed by `feedback: split`)
    feedback: dict[EvalProtocol, FeedbackMode] = {}  # per protocol; one not named gets `heldout`

    @model_validator(mode="after")
    def _feedback_needs_split(self) -> TaskSpec:
        if self.feedback.get("paper", "heldout") != "heldout":
            raise ValueError("feedback: the paper protocol keeps the paper's feedback (heldout)")
        if "split" in self.feedback.values() and self.split is None:
            raise ValueError("feedback: split needs a `split:` section (file, feedback and final sizes)")
        return self


class PreparedData(Record):
    task: str
    prepared_at: float
    prepare_fingerprint: str  # Task.prepare_fingerprint() of the script that wrote the data
    checksums: dict[str, str]  # "train/x.jsonl" → sha256


class SplitRecord(Record):
    """heldout-parts/split.json: which held-out file was divided (its checksum: a new prepare divides again) and
    the sizes it was divided into. The seed lies beside it in SEED, read by nobody."""

    file: str
    file_sha256: str
    feedback: int
    final: int


@dataclass(frozen=True)
class TaskData:
    train_dir: Path
    heldout_dir: Path

    @property
    def parts_dir(self) -> Path:
        return self.heldout_dir.parent / PARTS_DIR

    def part_dir(self, part: Part) -> Path:
        """The directory an evaluator reads for `part`: heldout/ itself, or one side of the split (a copy of
        heldout/ whose split file holds that side's items only)."""
        return self.heldout_dir if part == "heldout" else self.parts_dir / part


def task_data(data_root: Path, name: str) -> TaskData:
    """Where task `name`'s data lies under `data_root` (for readers that do not need the task's code)."""
    base = Path(data_root) / name
    return TaskData(base / "train", base / "heldout")


@dataclass(frozen=True)
class Task:
    spec: TaskSpec
    folder: Path

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def description(self) -> str:
        return (self.folder / self.spec.description).read_text()

    def check_engines(self) -> None:
        missing = [m for m in self.spec.engines if importlib.util.find_spec(m) is None]
        if missing:
            raise SpecError(
                [
                    f"task {self.name!r} needs {', '.join(missing)} (the `games` extra; Fast Downward and "
                    f"jericho compile from source: cmake and a C/C++ compiler): "
                    f"A2RL_EXTRAS=train,test,tasks,games bash tools/setup-env.sh"
                ]
            )

    def data(self, data_root: Path) -> TaskData:
        return task_data(data_root, self.name)

    def feedback_mode(self, protocol: str) -> FeedbackMode:
        return self.spec.feedback.get(protocol, "heldout")  # type: ignore[call-overload]

    def feedback_part(self, protocol: str) -> Part:
        """The part whose score answers a submission under `protocol`."""
        return "feedback" if self.feedback_mode(protocol) == "split" else "heldout"

    def prepare_fingerprint(self) -> str:
        """What prepared data depends on: the task's code other than its evaluator (the prepare script and the
        environment wrappers it ships to agents), the shared ReAct loop that interactive tasks ship as react.py,
        and the train files it must write. Read each time, so a long-lived grader notices an edit."""
        script = self.folder / self.spec.prepare
        if not script.is_file():
            raise SpecError([f"{script}: no such task module"])
        sources = [p for p in sorted(self.folder.glob("*.py")) if p.name != self.spec.evaluator]
        if "react.py" in self.spec.train_files:
            sources.append(PACKAGE / "tasklib" / "envs.py")
        h = hashlib.sha256(json.dumps(self.spec.train_files).encode())
        for path in sources:
            h.update(path.name.encode() + b"\0" + path.read_bytes())
        return h.hexdigest()

    def prepared(self, data_root: Path) -> PreparedData | None:
        """The record of the data under `data_root` if the current prepare script wrote it; None if missing or
        stale (written by another version of the script, or before records carried a fingerprint)."""
        try:
            rec = PreparedData.load_or_none(Path(data_root) / self.name / "prepared.json")
        except RecordError:
            return None
        return rec if rec is not None and rec.prepare_fingerprint == self.prepare_fingerprint() else None

    def heldout_id(self, data_root: Path) -> str:
        """Which held-out split the data under `data_root` holds (its files' checksums but the canary's and the
        secret seed's): each data root draws its own split of a generated task, so scores of two data roots
        compare only when these agree. "unprepared" without current prepared data."""
        rec = self.prepared(data_root)
        if rec is None:
            return "unprepared"
        split = {
            k: v
            for k, v in rec.checksums.items()
            if k.startswith("heldout/") and k not in (f"heldout/{CANARY}", "heldout/SEED")
        }
        return hashlib.sha256(json.dumps(split, sort_keys=True).encode()).hexdigest()


def task_registry(extra_dirs: list[Path] = ()) -> Registry[TaskSpec]:
    return Registry(TaskSpec, "task", HOME / "tasks", "A2RL_TASKS_PATH", filename="task.yaml").with_dirs(
        list(extra_dirs)
    )


def get_task(name: str, extra_dirs: list[Path] = ()) -> Task:
    reg = task_registry(extra_dirs)
    return Task(reg.get(name), reg.path(name).parent)
