"""Tasks: a folder under tasks/ with task.yaml, the agent's description.md, a prepare script and an evaluator.

Prepared data lives under a data root, split in two: `train/` (copied into workspaces) and `heldout/`
(read only by the grader, never linked from a workspace). `heldout/CANARY` holds a random string written with
the data: found in a transcript, code or a submission, it shows held-out data reached the agent (tasklib/leaks.py).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import random
import secrets
import shutil
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

from filelock import FileLock
from pydantic import BaseModel, ConfigDict, Field, model_validator

from a2rl.errors import SpecError
from a2rl.records import Record, RecordError, now, sha256_file
from a2rl.spec.registry import HOME, PACKAGE, Registry
from a2rl.spec.roots import DATA_FIX, guarded


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
    SCHEMA = 2  # 2 added prepare_fingerprint; prepared() treats version-1 records as stale
    task: str
    prepared_at: float
    prepare_fingerprint: str  # Task.prepare_fingerprint() of the script that wrote the data
    checksums: dict[str, str]  # "train/x.jsonl" → sha256


class SplitRecord(Record):
    """heldout-parts/split.json: which held-out file was divided (its checksum: a new prepare divides again) and
    the sizes it was divided into. The seed lies beside it in SEED, read by nobody."""

    SCHEMA = 1
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

    @cached_property
    def evaluator(self) -> ModuleType:
        return _load_module(self.folder / self.spec.evaluator, f"a2rl_task_{self.name}_evaluator")

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

    def ensure_prepared(self, data_root: Path, *, allow_network: bool = False, source: Path | None = None) -> TaskData:
        """Prepare once; racing preparers serialise on a lock and the loser finds the work done.

        `source` is a directory holding the upstream files in their published format; given, prepare reads
        them instead of downloading (how tests and air-gapped sites prepare). Data that another version of the
        prepare script wrote is prepared again, replacing it. A data root it cannot write is a RootError."""
        self.check_engines()
        with guarded(Path(data_root), "data root", DATA_FIX):
            return self._ensure_prepared(data_root, allow_network=allow_network, source=source)

    def _ensure_prepared(self, data_root: Path, *, allow_network: bool, source: Path | None) -> TaskData:
        if self.prepared(data_root):
            return self._ensure_parts(data_root)
        base = Path(data_root) / self.name
        if not (self.spec.offline or allow_network or source):
            state = (
                "was prepared by another version of its prepare script"
                if (base / "prepared.json").exists()
                else "is not prepared"
            )
            raise SpecError(
                [
                    f"task {self.name!r} {state} under {data_root}: run `a2rl prepare {self.name} "
                    f"--data-root {data_root}` (with --source if you prepared it from one) on a machine with internet "
                    "access (a login node)"
                ]
            )
        base.mkdir(parents=True, exist_ok=True)
        with FileLock(str(base) + ".lock"):
            if self.prepared(data_root):
                return self._ensure_parts(data_root, locked=True)
            tmp = base / f".prepare-{os.getpid()}"
            shutil.rmtree(tmp, ignore_errors=True)
            (tmp / "train").mkdir(parents=True)
            (tmp / "heldout").mkdir(mode=0o700)
            # Taken before the script runs: an edit meanwhile leaves the data stale, never falsely current.
            fingerprint = self.prepare_fingerprint()
            module = _load_module(self.folder / self.spec.prepare, f"a2rl_task_{self.name}_prepare")
            module.prepare(tmp / "train", tmp / "heldout", **({"source": Path(source)} if source else {}))
            missing = [f for f in [*self.spec.train_files, *self.spec.train_links] if not (tmp / "train" / f).exists()]
            if missing:
                raise SpecError([f"task {self.name!r}: prepare did not write train file(s) {missing}"])
            (tmp / "heldout" / CANARY).write_text(f"a2rl-canary-{secrets.token_hex(16)}\n")
            shutil.rmtree(base / PARTS_DIR, ignore_errors=True)  # a split of the data being replaced
            for part in ("train", "heldout"):
                shutil.rmtree(base / part, ignore_errors=True)
                os.replace(tmp / part, base / part)
            tmp.rmdir()
            sums = {
                str(p.relative_to(base)): sha256_file(p)
                for part in ("train", "heldout")
                for p in sorted((base / part).rglob("*"))
                if p.is_file()
            }
            PreparedData(task=self.name, prepared_at=now(), prepare_fingerprint=fingerprint, checksums=sums).dump(
                base / "prepared.json"
            )
            return self._ensure_parts(data_root, locked=True)

    def _ensure_parts(self, data_root: Path, *, locked: bool = False) -> TaskData:
        """Divide the held-out items into the feedback and final parts, once per prepared split (task.yaml
        `split`), with a seed drawn from the OS's secret source and kept in heldout-parts/SEED: the same parts
        for every run and grader of this data root, and none an agent can rebuild from public code."""
        data = self.data(data_root)
        split = self.spec.split
        if split is None:
            return data
        src = data.heldout_dir / split.file
        want = dict(file=split.file, feedback=split.feedback, final=split.final)
        try:
            rec = SplitRecord.load_or_none(data.parts_dir / "split.json")
        except RecordError:  # another version's record: divide again
            rec = None
        if rec is not None and rec.model_dump(include=set(want)) == want and rec.file_sha256 == sha256_file(src):
            return data
        if not locked:
            with FileLock(str(Path(data_root) / self.name) + ".lock"):
                return self._ensure_parts(data_root, locked=True)
        rows = [line for line in src.read_text(encoding="utf-8").splitlines() if line.strip()]
        if split.feedback + split.final > len(rows):
            raise SpecError(
                [
                    f"task {self.name!r}: split wants {split.feedback} feedback + {split.final} final items but "
                    f"{split.file} holds {len(rows)}"
                ]
            )
        seed = secrets.randbits(64)
        order = list(range(len(rows)))
        random.Random(seed).shuffle(order)
        tmp = data.parts_dir.parent / f".parts-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(mode=0o700)
        (tmp / "SEED").write_text(f"{seed}\n")
        cut = {"feedback": order[: split.feedback], "final": order[split.feedback : split.feedback + split.final]}
        for part, picked in cut.items():
            # a copy of heldout/ (the canary and any other file an evaluator reads) with this part's items only
            shutil.copytree(data.heldout_dir, tmp / part, ignore=shutil.ignore_patterns("SEED"))
            (tmp / part / split.file).write_text("".join(rows[i] + "\n" for i in sorted(picked)), encoding="utf-8")
        SplitRecord(**want, file_sha256=sha256_file(src)).dump(tmp / "split.json")
        shutil.rmtree(data.parts_dir, ignore_errors=True)
        os.replace(tmp, data.parts_dir)
        return data


def _load_module(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None or not path.is_file():
        raise SpecError([f"{path}: no such task module"])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def task_registry(extra_dirs: list[Path] = ()) -> Registry[TaskSpec]:
    return Registry(TaskSpec, "task", HOME / "tasks", "A2RL_TASKS_PATH", filename="task.yaml").with_dirs(
        list(extra_dirs)
    )


def get_task(name: str, extra_dirs: list[Path] = ()) -> Task:
    reg = task_registry(extra_dirs)
    return Task(reg.get(name), reg.path(name).parent)
