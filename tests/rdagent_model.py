"""The scripted model's answers for RD-Agent's RL loop (rdagent 1.0.0, `python -m rdagent.app.rl.loop`), which
calls no tools: each loop asks, in three plain chat completions told apart by their system prompts, for a
hypothesis (JSON), the training code (a python block it writes to $WORKSPACE/code/main.py and runs itself) and
feedback on the result (JSON). The code is the scripted training script followed by `a2rl submit` (RD-Agent's
own submission posts without the run's token, which the grading API refuses), or (`WRAP_UP_THEN_HANG`) the
training script, then one that waits for the run's wrap-up signal and ends printing it, so that RD-Agent hands
the text to its feedback step, then one that hangs until the run is stopped."""

from __future__ import annotations

import json

from a2rl.drivers.protocols import Reply, Request, Usage
from scripted_server import TRAIN, ScriptedModel

SUBMIT = 'import subprocess\nsubprocess.run(["a2rl", "submit", str(out)], check=True)\n'
# PLAN_WRAP_UP's steps, one loop's code each: train; wait for the wrap-up signal and print it (then end: RD-Agent
# hands a script's output to its feedback step only once it exits; no torch, so it exits at once); hang
WAIT = (
    'import os, time\nfrom pathlib import Path\nwrap = Path(os.environ["WORKSPACE"], "WRAP_UP")\n'
    'while not wrap.exists():\n    time.sleep(0.5)\nprint("wrap-up:", wrap.read_text(), flush=True)\n'
)
WRAP_UP_THEN_HANG = [TRAIN, WAIT, "import time\ntime.sleep(3600)\n"]
STAGES = {  # a phrase of each stage's system prompt: its answer
    "负责生成训练假设": json.dumps(
        {
            "hypothesis": "A few SFT steps on the training prompts",
            "reason": "first run",
            "algorithm": "SFT",
            "is_formal_training": True,
        }
    ),
    "负责分析实验结果": json.dumps({"decision": True, "reason": "trained and submitted", "suggestions": "none"}),
    "负责分析失败的实验": json.dumps({"error_type": "scripted", "root_cause": "see the log", "fix_suggestion": ""}),
}


class RDAgentModel(ScriptedModel):
    def __init__(self, codes: list[str] | None = None):
        super().__init__([])
        self.codes = codes or [TRAIN + SUBMIT]  # the nth code request gets the nth (the last from then on)
        self.stages: list[str] = []  # the stage of each request, in order

    def reply(self, req: Request) -> Reply:
        system = next((m.text for m in req.messages if m.role == "system"), "")
        usage = Usage(input_tokens=sum(len(m.text) for m in req.messages) // 4 + 100, output_tokens=20)
        stage = "code" if "负责生成训练代码" in system else next((k for k in STAGES if k in system), "other")
        with self.lock:
            self.requests.append(req)
            self.stages.append(stage)
            n = self.stages.count("code") - 1
        if stage == "code":
            return Reply("```python\n" + self.codes[min(n, len(self.codes) - 1)] + "```", usage=usage)
        return Reply(STAGES.get(stage, "ok"), usage=usage)
