"""A scripted model for the real agent CLIs (test code, loopback only): it speaks every wire protocol of
a2rl.drivers.protocols and answers each conversation with the next step of a fixed plan, carried out with the
CLI's own tools (its shell tool, its file-writing tool). A step's place in the plan is the number of tool
calls already in the conversation, so the server keeps no per-session state; requests without our tools
(titles, summaries, routing checks the CLIs make on the side) get a short text answer.

The plan: learn the working directory (`pwd`), write a training script into it (code/), run it (the tiny
model, a few SFT steps, saved under $OUTPUT_DIR/sft), then either `a2rl submit` the saved model and finish
(`PLAN_SUBMIT`), or wait for the run's wrap-up signal ($WORKSPACE/WRAP_UP), print it, and hang until stopped
(`PLAN_WRAP_UP`).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from a2rl.drivers.protocols import ProtocolError, Reply, Request, ToolCall, Usage, route, send
from a2rl.drivers.wire_replies import render, render_error
from a2rl.drivers.wire_requests import parse_request
from a2rl.httpjson import running

TRAIN = '''\
"""A few SFT steps on the task's training prompts (written by the scripted model)."""
import json, os
from pathlib import Path
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

torch.manual_seed(0)
base = os.environ["MODEL_PATH"]
tok = AutoTokenizer.from_pretrained(base)
model = AutoModelForCausalLM.from_pretrained(base)
rows = [json.loads(l) for l in Path(os.environ["DATA_PATH"], "train.jsonl").read_text().splitlines()][:8]
texts = [json.dumps(r) for r in rows]
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
for step in range(3):
    batch = tok(texts, return_tensors="pt", padding=True, truncation=True, max_length=64)
    loss = model(**batch, labels=batch["input_ids"]).loss
    loss.backward(); opt.step(); opt.zero_grad()
    print(f"step {step} loss {loss.item():.3f}", flush=True)
out = Path(os.environ["OUTPUT_DIR"], "sft")
model.save_pretrained(out); tok.save_pretrained(out)
print("saved", out)
'''

# no $(...): gemini's shell tool refuses command substitution
WAIT_WRAP_UP = 'while [ ! -e "$WORKSPACE/WRAP_UP" ]; do sleep 0.5; done; printf "wrap-up: "; cat "$WORKSPACE/WRAP_UP"'


@dataclass
class Step:
    action: str  # pwd | write | shell | finish
    command: str = ""


PLAN_SUBMIT = [
    Step("pwd"),
    Step("write"),
    Step("shell", "python train.py"),
    Step("shell", 'a2rl submit "$OUTPUT_DIR/sft"'),
    Step("finish"),
]
PLAN_WRAP_UP = [
    Step("pwd"),
    Step("write"),
    Step("shell", "python train.py"),
    Step("shell", WAIT_WRAP_UP),
    Step("shell", "sleep 3600"),
]

# each CLI's tools: shell tool and how it takes a command; file tool and its argument names
SHELLS = {
    "Bash": lambda c: {"command": c, "timeout": 600000, "description": "step"},  # claude
    "run_shell_command": lambda c: {"command": c, "description": "step"},  # gemini
    "bash": lambda c: {"command": c, "timeout": 600000, "description": "step"},  # opencode
    "shell": lambda c: {"command": ["bash", "-lc", c], "timeout_ms": 600000},  # codex (older)
    "shell_command": lambda c: {"command": c, "timeout_ms": 600000},  # codex
    "exec_command": lambda c: {"cmd": c, "yield_time_ms": 600000},  # codex (unified exec)
    "terminal": lambda c: {"command": c, "timeout": 600, "security_risk": "LOW"},
}  # openhands
WRITERS = {"Write": ("file_path", "content"), "write_file": ("file_path", "content"), "write": ("filePath", "content")}
PATCHERS = ("apply_patch",)  # codex writes files with a patch


def _write_call(req: Request, path: str, content: str) -> tuple[str, dict] | None:
    for t in req.tools:
        if t.name == "file_editor":  # openhands
            return t.name, {"command": "create", "path": path, "file_text": content, "security_risk": "LOW"}
        if t.name in WRITERS:
            key, body = WRITERS[t.name]
            return t.name, {key: path, body: content}
        if t.name in PATCHERS:
            patch = (
                "*** Begin Patch\n*** Add File: "
                + path
                + "\n"
                + "".join("+" + line + "\n" for line in content.splitlines())
                + "*** End Patch\n"
            )
            props = t.parameters.get("properties") or {}
            return t.name, {"patchText" if "patchText" in props else "input": patch}  # opencode | codex
    return None


class ScriptedModel:
    def __init__(self, plan: list[Step], refuse: str | None = None):
        self.plan = plan
        self.refuse = refuse  # answer every request with this API error (HTTP 400) instead
        self.requests: list[Request] = []  # every parsed request, side requests included
        self.tool_outputs: list[str] = []  # the results the CLI sent back, in order
        self.tool_outputs_of: dict[str, list[str]] = {}  # the same, by the requests' model (CLIs sharing a server)
        self.lock = threading.Lock()

    def reply(self, req: Request) -> Reply:
        shell = next((t.name for t in req.tools if t.name in SHELLS), None)
        results = [r for m in req.messages if m.role == "tool" for r in m.tool_results]
        with self.lock:
            self.requests.append(req)
            if results and shell:
                self.tool_outputs.append(results[-1].content)
                self.tool_outputs_of.setdefault(req.model, []).append(results[-1].content)
        usage = Usage(
            input_tokens=sum(len(m.text) for m in req.messages) // 4 + 100, output_tokens=20, cached_input_tokens=10
        )
        if shell is None:
            return Reply("ok", usage=usage)
        # codex's exec_command hands back a session of a command still running after its yield time: poll it
        # (write_stdin with no input) until it exits; polls are no steps of the plan
        if results and (running := re.search(r"Process running with session ID (\d+)", results[-1].content)):
            return Reply(
                "Waiting.",
                [
                    ToolCall(
                        f"poll_{len(self.requests)}",
                        "write_stdin",
                        {"session_id": int(running.group(1)), "chars": "", "yield_time_ms": 30000},
                    )
                ],
                usage,
            )
        n = sum(c.name != "write_stdin" for m in req.messages if m.role == "assistant" for c in m.tool_calls)
        if n >= len(self.plan):
            return Reply("Done.", usage=usage)
        step, call_id = self.plan[n], f"call_{n}_{len(self.requests)}"
        if step.action == "finish":
            if req.tool("finish"):  # openhands ends its conversation only through this tool
                return Reply("", [ToolCall(call_id, "finish", {"message": "Trained and submitted."})], usage)
            return Reply("The model is trained and submitted. Done.", usage=usage)
        if step.action == "write":
            cwd = self.cwd(results)
            name_args = _write_call(req, f"{cwd}/train.py", TRAIN)
            if name_args is None:
                raise ProtocolError(f"no file tool among {[t.name for t in req.tools]}")
            return Reply("Writing the training script.", [ToolCall(call_id, *name_args)], usage)
        command = "pwd" if step.action == "pwd" else step.command
        return Reply(f"Step {n}.", [ToolCall(call_id, shell, SHELLS[shell](command))], usage)

    @staticmethod
    def cwd(results) -> str:
        for r in results:
            if m := re.search(r"(/\S*/code)\b", r.content):
                return m.group(1)
        raise ProtocolError("no working directory in the tool results: " + json.dumps([r.content for r in results]))


class ModelPerDriver(ScriptedModel):
    """For runs of one sweep that share the server: each request is answered by the model scripted for its
    run's driver (the request's `model`)."""

    def __init__(self, models: dict[str, ScriptedModel]):
        super().__init__([])
        self.models = models

    def reply(self, req: Request) -> Reply:
        with self.lock:
            self.requests.append(req)
        if req.model not in self.models:
            raise ProtocolError(f"no scripted model for {req.model!r} (scripted: {sorted(self.models)})")
        return self.models[req.model].reply(req)


class _Handler(BaseHTTPRequestHandler):
    server: "_Server"

    def do_POST(self) -> None:
        r = route("POST", self.path)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.log.append((self.path, body))
        if r is None:
            return send(self, render_error("chat", 404, f"no route {self.path}"))
        try:
            req = parse_request(r, json.loads(body))
            if self.server.model.refuse:
                return send(self, render_error(r.protocol, 400, self.server.model.refuse))
            send(self, render(req, self.server.model.reply(req), model=req.model or "scripted"))
        except (ProtocolError, ValueError) as e:
            send(self, render_error(r.protocol, 400, str(e)))

    def do_GET(self) -> None:  # model lists some CLIs ask for
        self.server.log.append((self.path, b""))
        data = json.dumps({"object": "list", "data": [{"id": "scripted", "object": "model"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format, *args) -> None:
        pass


class _Server(ThreadingHTTPServer):
    def __init__(self, model: ScriptedModel):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.model, self.log = model, []


@contextmanager
def scripted_server(
    plan: list[Step], refuse: str | None = None, model: ScriptedModel | None = None
) -> Iterator[tuple[str, ScriptedModel, list]]:
    """(http://127.0.0.1:PORT, the model, the raw request log) for the duration of the block; `model`: one
    that answers otherwise (a ScriptedModel subclass) in place of the plan's."""
    server = _Server(model or ScriptedModel(plan, refuse))
    with running(server) as url:
        yield url, server.model, server.log
