"""The reference pipeline's submissions and stage records: each stage's model is submitted in the background
(`a2rl submit`), and the stage log ($OUTPUT_DIR/stages.json) names the submission beside the stage that made it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from a2rl.reference.process import is_main, log
from a2rl.store.stages import STAGES_FILE, Stage, StageLog


def record_stage(out: Path, stage: Stage) -> None:
    if not is_main():
        return
    path = out / STAGES_FILE
    stages = StageLog.load_or_none(path) or StageLog(agent="pipeline")
    stages.stages.append(stage)
    stages.dump(path)


class Submitter:
    """Submits in the background (training goes on while the grader scores), one submission at a time as the
    API requires; each submission id lands in the stage log beside the stage that made the model."""

    def __init__(self):
        self.proc: subprocess.Popen | None = None
        self.model_dir: Path | None = None

    def submit(self, model_dir: Path) -> None:
        """A failure is logged, never fatal (the next stage may still do better)."""
        if not is_main():
            return
        if not os.environ.get("GRADING_SERVER_URL"):
            log("no grading server; skipping submit")
            return
        self.wait()
        log(f"submitting {model_dir}")
        self.model_dir = model_dir
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "a2rl", "submit", str(model_dir)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def wait(self) -> None:
        if self.proc is None:
            return
        output = self.proc.communicate()[0]
        print(output, end="", flush=True)
        if self.proc.returncode != 0:
            log(f"submit failed with exit code {self.proc.returncode}")
        try:
            sid = json.loads(output[output.index("{") : output.rindex("}") + 1]).get("submission_id")
        except ValueError:
            sid = None
        out = self.model_dir.parent
        if sid and (stages := StageLog.load_or_none(out / STAGES_FILE)) is not None:
            for stage in stages.stages:
                if stage.model_dir == self.model_dir.name:
                    stage.submission_id = sid
            stages.dump(out / STAGES_FILE)
        self.proc = None


SUBMITTER = Submitter()
submit = SUBMITTER.submit
