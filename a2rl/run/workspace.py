"""The agent's workspace on scratch: all it can see of the benchmark.

    code/            the agent's working directory
    home/, tmp/      its HOME and TMPDIR
    output/          where it saves models to submit
    data/            the train split (a read-only copy: never a link to the data root's folders, whose held-out
                     half must stay out of reach; a task's train_links are links to single files, which the
                     sandbox binds read-only one by one: `linked_files`)
    models/base      link to the base model (read-only)
    description.md   the task, instructions.md the rules, run_meta.json the budget (paper-compatible), the
                     train rows' format (the task's train_format: how agents such as `pipeline` read data/),
                     the protocol the run is graded under (also $EVAL_PROTOCOL) and the chat_template_kwargs
                     its chat prompts are rendered with

Nothing here is ever read back for scoring: results live in the sweep directory. What the agent made (code/,
output/, and its own state in home/) is saved there when its job is interrupted and put back when a requeue lands
on a node whose scratch lacks it (`save_for_resume`, `restore_for_resume`).
"""

from __future__ import annotations

import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from a2rl.records import Record
from a2rl.spec.tasks import DEFAULT_PROTOCOL, EvalProtocol, Task, TaskData

# one line in the instructions, so that an agent can copy it whole
CURL_SUBMIT = (
    """curl -s -X POST $GRADING_SERVER_URL/submit -H "Authorization: Bearer $GRADING_TOKEN" """
    """-H 'Content-Type: application/json' -d '{{"model_path": "<dir>"}}'"""
)
INSTRUCTIONS = (
    """\
# Instructions

You have {budget} of wall time (time spent waiting for grading is not counted, up to a cap) to improve the
base model at `$MODEL_PATH` on the task described in description.md. The training data is in `$DATA_PATH`;
the held-out evaluation data is not available to you. Your submissions are scored under the `{protocol}`
protocol (description.md, "How you are scored", says how it prompts the model and reads its answers; the name
is also in `$EVAL_PROTOCOL` and run_meta.json). Chat prompts are rendered with the base model's chat template
and run_meta.json's `chat_template_kwargs`.{feedback}

- Work in `$WORKSPACE/code`. Save each model you want scored as a directory under `$OUTPUT_DIR` with full
  weights in safetensors (`model.save_pretrained(dir)`; merge LoRA adapters first) and the tokenizer.
- Submit it with `a2rl submit $OUTPUT_DIR/<dir>` or
  `"""
    + CURL_SUBMIT
    + """`
  (every request needs the token, as that header or as `?token=$GRADING_TOKEN`).
  The call blocks until the model is scored and returns its score, the baseline and your best so far.
  One submission at a time: another one sent while it waits is refused (HTTP 429). A submission holds at most
  a few dozen files (weights, config, tokenizer) of bounded size. Your run's disk space for submissions is
  bounded too: one that would not fit is refused (HTTP 507, with bytes_used, bytes_needed, bytes_allowed);
  a smaller one (e.g. saved in bf16) may still fit.
- `curl -s -H "Authorization: Bearer $GRADING_TOKEN" $GRADING_SERVER_URL/time` tells the remaining budget.
  Submissions after the budget ends are refused. Grading waits go uncounted only up to a cap (by default half
  the budget in total); keeping submissions in flight while you work does not stop the clock.
- Your best submission counts. Submitting the base model unchanged scores the baseline.
"""
)


class RunMeta(Record):
    """The paper's run_meta.json: for the agent's information only, never read back."""

    run_id: str
    task: str
    start_time: float
    timeout_s: float
    train_format: str | None = None  # the task's TrainFormat (a2rl.spec.tasks): what the rows in data/ are
    protocol: EvalProtocol  # how the grader prompts and scores this run's submissions (tasks/*/description.md)
    # what the grader passes to the model's chat template when it builds chat prompts: the model's generation
    # preset's (configs/generation/; Qwen3: enable_thinking), so training can render the same prompts
    chat_template_kwargs: dict[str, Any] = {}
    last_submit_time: float | None = None
    end_time: float | None = None


@dataclass(frozen=True)
class Workspace:
    root: Path

    @property
    def code(self) -> Path:
        return self.root / "code"

    @property
    def output(self) -> Path:
        return self.root / "output"

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def model(self) -> Path:
        return self.root / "models" / "base"

    @property
    def meta_path(self) -> Path:
        return self.root / "run_meta.json"


def _budget_text(seconds: float) -> str:
    return f"{seconds / 3600:g} hours" if seconds >= 3600 else f"{seconds / 60:g} minutes"


def create_workspace(
    root: Path,
    *,
    task: Task,
    data: TaskData,
    model_dir: Path,
    budget_s: float,
    source_tree: Path,
    protocol: EvalProtocol = DEFAULT_PROTOCOL,
    final: str = "best-feedback",
) -> Workspace:
    """Lay out a workspace; idempotent, so a requeued run finds its own files again. `final`: the sweep's
    grader.final, told to the agent where the task splits its held-out items under `protocol`."""
    root = Path(root).resolve()
    if root == source_tree or source_tree in root.parents:
        raise ValueError(f"workspace {root} is inside the source tree {source_tree}; set scratch_root elsewhere")
    ws = Workspace(root)
    for d in (ws.code, ws.output, ws.model.parent):
        d.mkdir(parents=True, exist_ok=True)
    if not ws.data.exists():
        tmp = root / ".data.partial"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        for name in task.spec.train_files:
            src = data.train_dir / name
            (shutil.copytree if src.is_dir() else shutil.copyfile)(src, tmp / name)
        for name in task.spec.train_links:
            (tmp / name).symlink_to((data.train_dir / name).resolve())
        _read_only(tmp)
        tmp.rename(ws.data)
    if not ws.model.is_symlink():
        ws.model.symlink_to(model_dir, target_is_directory=True)
    (root / "description.md").write_text(task.description)
    (root / "instructions.md").write_text(
        INSTRUCTIONS.format(
            budget=_budget_text(budget_s), protocol=protocol, feedback=_feedback_text(task, protocol, final)
        )
    )
    return ws


FINAL_RULES = {
    "best-feedback": "your best-scoring submission",
    "last": "your last scored submission",
    "agent": 'the last submission you mark with `a2rl submit --final` (or `"final": true` in the request body; '
    "none marked: your best-scoring one)",
}


def _feedback_text(task: Task, protocol: str, final: str) -> str:
    """What `feedback: split` means for the agent; nothing where every held-out item answers."""
    split = task.spec.split
    if task.feedback_mode(protocol) != "split" or split is None:
        return ""
    return (
        f"\n\nThe scores you are answered with are on {split.feedback} of the held-out items. After the run, "
        f"{FINAL_RULES[final]} is scored once on {split.final} other held-out items, which no answer drew on: that "
        "is the run's final score."
    )


def linked_files(ws: Workspace) -> list[Path]:
    """The files data/'s links point to (a task's train_links): what the sandbox must bind for them to resolve."""
    return sorted(p.resolve() for p in ws.data.iterdir() if p.is_symlink()) if ws.data.is_dir() else []


RESUMED = ("home", "code", "output")  # in saving order: under a size cap, weights in output/ go first


def is_blank(root: Path) -> bool:
    """No code or output in the workspace: it is new, or its node-local scratch was wiped (another node)."""
    return not any(any((root / d).iterdir()) for d in ("code", "output") if (root / d).is_dir())


def save_for_resume(ws: Workspace, dest: Path, max_bytes: float) -> tuple[int, list[str]]:
    """Copy the workspace's code/, output/ and home/ into `dest`, replacing an earlier copy only once this one is
    complete (temp dir + rename). Regular files past `max_bytes` in total are skipped. (bytes copied, skipped)."""
    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    copied, skipped = 0, []
    for name in RESUMED:
        for dirpath, dirnames, filenames in os.walk(ws.root / name):
            rel = Path(dirpath).relative_to(ws.root)
            (tmp / rel).mkdir(parents=True, exist_ok=True)
            for entry in (*dirnames, *filenames):
                src, dst = Path(dirpath) / entry, tmp / rel / entry
                if src.is_symlink():
                    os.symlink(os.readlink(src), dst)
                elif src.is_file():
                    size = src.stat().st_size
                    if copied + size > max_bytes:
                        skipped.append(str(rel / entry))
                        continue
                    shutil.copy2(src, dst)
                    copied += size
    tmp.mkdir(parents=True, exist_ok=True)
    old = dest.with_name(dest.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if dest.exists():
        dest.rename(old)
    tmp.rename(dest)
    shutil.rmtree(old, ignore_errors=True)
    return copied, skipped


def restore_for_resume(ws: Workspace, src: Path) -> None:
    for name in RESUMED:
        if (src / name).is_dir():
            shutil.copytree(src / name, ws.root / name, symlinks=True, dirs_exist_ok=True)


def _read_only(path: Path) -> None:
    for dirpath, _, filenames in os.walk(path):
        for f in filenames:
            if not os.path.islink(os.path.join(dirpath, f)):  # a train link's target is the shared prepared data
                os.chmod(os.path.join(dirpath, f), stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    for dirpath, _, _ in os.walk(path, topdown=False):
        os.chmod(dirpath, 0o555)


def agent_env(
    ws: Workspace,
    *,
    task: str,
    protocol: EvalProtocol,
    model_name: str,
    url: str,
    cpus: int,
    passthrough: list[str],
    python: Path,
) -> dict[str, str]:
    """The agent's whole environment: the paper's variables and a minimal base. No launcher variable leaks
    through unless the agent stack lists it, so no path into the sweep directory reaches the agent."""
    bindir = str(python.parent)  # `python` and `a2rl` resolve to the agents' own environment
    env = {
        "PATH": f"{bindir}:/usr/local/bin:/usr/bin:/bin",
        # a home of its own: the launcher's holds ~/.cache/a2rl (the data root, held-out split included)
        "HOME": str(ws.root / "home"),
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "TMPDIR": str(ws.root / "tmp"),
        "TASK": task,
        "EVAL_PROTOCOL": protocol,  # only the protocol's name: its prompts are public (description.md)
        "BASE_MODEL": model_name,
        "WORKSPACE": str(ws.root),
        "MODEL_PATH": str(ws.model),
        "DATA_PATH": str(ws.data),
        "OUTPUT_DIR": str(ws.output),
        "GRADING_SERVER_URL": url,
        "OMP_NUM_THREADS": str(cpus),
        "MKL_NUM_THREADS": str(cpus),
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "PYTHONUNBUFFERED": "1",
    }
    for name in ("CUDA_VISIBLE_DEVICES", *passthrough):  # a stack that needs the real HOME lists it
        if name in os.environ:
            env[name] = os.environ[name]
    for d in ("tmp", "home"):
        (ws.root / d).mkdir(exist_ok=True)
    return env
