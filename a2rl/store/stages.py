"""Training stages an agent reports about itself: `$OUTPUT_DIR/stages.json` in its workspace, copied to
`runs/<id>/stages.json` when the agent ends, for the run report (train type and route).

Only stacks that declare `stage_records: true` (the reference `pipeline`) have theirs copied, and the report
labels what it takes from it as self-reported: the file is written inside the agent's sandbox, so it says what
the agent claims it did, never what a grader measured. Scores come only from the ledger.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from a2rl.records import Record, RecordError

log = logging.getLogger("a2rl.stages")

STAGES_FILE = "stages.json"
MAX_BYTES = 1 << 20  # an agent-written file: anything larger is not a stage log
# Stage names and the train types they stand for (reporting.metrics' TRAINERS names)
TRAIN_TYPES = {"sft": "SFT", "grpo": "GRPO", "dpo": "DPO", "ppo": "PPO"}


class Stage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str  # sft, grpo ...
    hyperparameters: dict[str, Any]
    steps: int  # optimizer steps done (a budget-sized stage may stop before its planned steps)
    planned_steps: int
    wall_s: float
    model_dir: str | None  # relative to the output directory; None: no model (a skipped stage)
    submission_id: str | None = None  # of the submission of model_dir; None: not submitted (or refused)
    skipped: str | None = None  # why the stage did not run (steps 0, no model)

    @property
    def train_type(self) -> str:
        return TRAIN_TYPES.get(self.name, self.name.upper())


class StageLog(Record):
    agent: str
    stages: list[Stage] = []

    def route(self) -> str:
        """ "SFT→GRPO": the stages that trained, in order."""
        return "→".join(s.train_type for s in self.stages if s.steps > 0)

    def train_types_until(self, submission_id: str) -> list[str] | None:
        """The train types of the stages up to the one that produced `submission_id`; None if none did."""
        for i, stage in enumerate(self.stages):
            if stage.submission_id == submission_id:
                return list(dict.fromkeys(s.train_type for s in self.stages[: i + 1] if s.steps > 0))
        return None


def collect_stage_log(source: Path, dest: Path) -> StageLog | None:
    """Copy an agent's stage log into the sweep directory, if it is one; a missing, oversized or malformed file
    is logged and skipped, never an error of the run."""
    try:
        if not source.is_file() or source.is_symlink():
            return None
        if source.stat().st_size > MAX_BYTES:
            log.warning("%s: over %d bytes, not a stage log; skipped", source, MAX_BYTES)
            return None
        stages = StageLog.load(source)
    except (OSError, RecordError) as e:
        log.warning("stage log skipped: %s", e)
        return None
    stages.dump(dest)
    return stages
