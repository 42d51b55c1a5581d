"""Reference agent without an LLM: SFT then GRPO with TRL, submitting after each stage.

Runs inside an agent workspace as `python -m a2rl.reference.pipeline [options]`, configured by the job's
environment: MODEL_PATH (base model), DATA_PATH (the task's train files), OUTPUT_DIR (writable),
GRADING_SERVER_URL (optional: without it submissions are skipped). The route follows the task's train format,
read from $WORKSPACE/run_meta.json (or --train-format), and its prompts are those the grader sends under the run's
protocol, also read from run_meta.json (or --protocol; `paper` when it names none): the static routes build them
with the graders' own builders (a2rl.tasklib.prompts) and reward by the graders' own checks (a2rl.tasklib.answers).
- qa_short {"prompt", "answer"}: SFT on " <answer>" then a newline, then GRPO rewarding a first line that
  equals the answer;
- qa_numeric {"question", "answer"} (GSM8K): SFT on the rationales, then GRPO rewarding the final number the
  grader reads. paper: the chat over paper's four exemplars, replies ending "The answer is N" and EOS, the number
  read as paper's extraction does; a2rl: the 4-shot completion prompt over the first four train rows, replies
  ending "#### N" and the grader's stop string;
- code_with_tests {"prompt", "canonical_solution", "test", "entry_point"} (HumanEval): SFT on the solutions,
  then GRPO rewarding completions that pass the problem's unit tests in the code sandbox (a2rl.tasklib.coderunner).
  paper: the chat instruction, the whole function in a code block (the block's code is what paper runs);
  a2rl: a raw continuation of the prompt;
- instruction_reference {"instruction", "reference"}: SFT on the reference answering the instruction as the
  single user turn both protocols prompt with; then, only with --train-judge (an OpenAI-compatible endpoint for
  training, never the grader's), GRPO rewarding P(completion beats the row's reference) as that judge weighs
  them pairwise (a2rl.llm.judge, a2rl.tasklib.pairwise); without one, SFT only (no rule reward stands in for a judge);
- env_trajectories: a2rl.reference.interactive, which plays each episode through the task's env.py transcript of the
  run's protocol (the grader's own loop) for its prompts, replies and step rewards.
Devices: bf16 on the job's GPUs (one process each through `accelerate launch`, DeepSpeed ZeRO-2/3 optional),
fp32 on CPU (--processes N: N processes in a gloo group; DeepSpeed ZeRO-2 runs there too). Rank 0 alone saves,
submits and records. --lora-r trains LoRA adapters (--qlora: on a 4-bit base) that are merged before each submission.
Each stage is sized from the budget left (the grading API's /time) and recorded in $OUTPUT_DIR/stages.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import typing
from pathlib import Path

import torch
from transformers import AutoTokenizer

from a2rl.llm.judge import ChatClient, JudgeError
from a2rl.reference import interactive
from a2rl.reference.formats import STATIC_FORMATS, Chat, Route, check_rows
from a2rl.reference.process import deepspeed_on_cpu, gpu_count, launch_command, log
from a2rl.reference.rewards import judge_reward
from a2rl.reference.schedule import Schedule
from a2rl.reference.stages import grpo_stage, sft_stage
from a2rl.reference.submitter import SUBMITTER, record_stage, submit
from a2rl.spec.tasks import DEFAULT_PROTOCOL, EvalProtocol
from a2rl.store.stages import Stage

# This module is the command line and the routes' order; the parts are process.py (rank, log lines, devices, the
# launch), schedule.py (each stage's share of the budget), stages.py (TRL's SFT and GRPO), submitter.py (submissions
# and the stage log), formats.py and rewards.py (the per-format adapters) and interactive.py (env_trajectories).
TRAIN_JUDGE_KEY_ENV = "TRAIN_JUDGE_API_KEY"  # the training judge's key (the stack passes it through)


# Defaults per route: static train.jsonl rows, or interactive games (a2rl.reference.interactive).
DEFAULTS = {
    "static": dict(
        sft_steps=700, sft_lr=3e-3, sft_batch_size=32, grpo_steps=150, grpo_lr=1e-4, grpo_prompts=8, num_generations=8
    ),
    "interactive": dict(
        sft_steps=300,
        sft_lr=3e-3,
        sft_batch_size=8,
        grpo_steps=40,
        grpo_lr=1e-4,
        grpo_prompts=4,
        num_generations=8,
        max_completion_length=16,
    ),
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m a2rl.reference.pipeline",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--train-format",
        choices=list(STATIC_FORMATS) + ["env_trajectories"],
        help="default: train_format in $WORKSPACE/run_meta.json",
    )
    p.add_argument(
        "--protocol",
        choices=typing.get_args(EvalProtocol),
        help="the grading protocol to train for; default: protocol in $WORKSPACE/run_meta.json, else "
        f"{DEFAULT_PROTOCOL}",
    )
    p.add_argument("--sft-steps", type=int, help="0 skips SFT (GRPO starts from MODEL_PATH)")
    p.add_argument("--sft-lr", type=float)
    p.add_argument("--sft-batch-size", type=int)
    p.add_argument("--grpo-steps", type=int, help="0 skips GRPO")
    p.add_argument("--grpo-lr", type=float, help="1e-3 collapses the tiny model")
    p.add_argument("--grpo-prompts", type=int, help="prompts per GRPO step")
    p.add_argument("--num-generations", type=int, help="samples per prompt (>= 2)")
    p.add_argument("--max-completion-length", type=int)
    p.add_argument("--lora-r", type=int, default=0, help="LoRA rank (0: full fine-tuning); merged before submitting")
    p.add_argument("--lora-alpha", type=int, help="default 2 x rank")
    p.add_argument("--qlora", action="store_true", help="LoRA on a 4-bit base (bitsandbytes, GPU only)")
    p.add_argument(
        "--processes",
        type=int,
        help="training processes under `accelerate launch` (default: one per GPU of the job; 1 on CPU, "
        "where more train as a gloo group)",
    )
    p.add_argument("--deepspeed", help="DeepSpeed config: a name in --deepspeed-dir (zero2, zero3) or a JSON file")
    p.add_argument(
        "--deepspeed-dir", type=Path, help="where the named DeepSpeed configs are (configs/agents/deepspeed)"
    )
    p.add_argument("--no-schedule", action="store_true", help="run every planned step whatever the budget left")
    p.add_argument(
        "--train-judge",
        metavar="URL",
        help="OpenAI-compatible base URL (.../v1) of a judge for GRPO on instruction_reference rows; its "
        f"key, if any, in ${TRAIN_JUDGE_KEY_ENV}. Unset: SFT only on those rows",
    )
    p.add_argument("--train-judge-model", help="the model the training judge serves (needed with --train-judge)")
    p.add_argument("--seed", type=int, default=0)
    p.epilog = "Defaults per route: " + json.dumps(DEFAULTS)
    return p.parse_args(argv)


def with_defaults(args: argparse.Namespace, route: str, fmt: Route | None = None) -> argparse.Namespace:
    defaults = dict(DEFAULTS[route], **({"max_completion_length": fmt.max_completion_length} if fmt else {}))
    for k, v in defaults.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    return args


def run_meta() -> tuple[Path, dict]:
    """The workspace's run_meta.json and what it says ({} when it is missing or unreadable)."""
    meta = Path(os.environ.get("WORKSPACE", ".")) / "run_meta.json"
    try:
        told = json.loads(meta.read_text())
    except (OSError, ValueError):
        told = {}
    return meta, told if isinstance(told, dict) else {}


def train_format(args: argparse.Namespace) -> str:
    """--train-format, else the task's, as the workspace's run_meta.json tells it."""
    if args.train_format:
        return args.train_format
    meta, told = run_meta()
    fmt = told.get("train_format")
    if fmt not in (*STATIC_FORMATS, "env_trajectories"):
        raise ValueError(
            f"no known train format: pass --train-format, or run in a workspace whose {meta} names one (found {fmt!r})"
        )
    return fmt


def protocol(args: argparse.Namespace) -> str:
    """--protocol, else the run's, as the workspace's run_meta.json tells it, else the default protocol."""
    if args.protocol:
        return args.protocol
    meta, told = run_meta()
    name = told.get("protocol", DEFAULT_PROTOCOL)
    if name not in typing.get_args(EvalProtocol):
        raise ValueError(f"{meta} names protocol {name!r}, which this pipeline has no prompts for: pass --protocol")
    return name


def template_kwargs() -> dict:
    """The chat_template_kwargs the grader renders this run's chat prompts with, as the workspace's run_meta.json
    tells them ({} without one)."""
    meta, told = run_meta()
    kwargs = told.get("chat_template_kwargs", {})
    if not isinstance(kwargs, dict):
        raise ValueError(f"{meta}: chat_template_kwargs must be a mapping, not {kwargs!r}")
    return kwargs


def deepspeed_config(args: argparse.Namespace) -> Path | None:
    if not args.deepspeed:
        return None
    path = Path(args.deepspeed)
    if not path.suffix:
        path = (args.deepspeed_dir or Path(".")) / f"{args.deepspeed}.json"
    if not path.is_file():
        raise ValueError(f"--deepspeed {args.deepspeed}: no config at {path}")
    return path


def devices(args: argparse.Namespace) -> tuple[int, int]:
    """The job's GPUs and the training processes to launch; a ValueError for options the job cannot serve."""
    gpus = gpu_count(dict(os.environ), torch.cuda.is_available(), torch.cuda.device_count())
    if args.qlora and gpus == 0:
        raise ValueError("--qlora needs the run's GPUs; this job has none")
    processes = max(gpus, 1) if args.processes is None else args.processes
    if processes < 1 or (gpus and processes > gpus):
        raise ValueError(
            f"--processes {processes}: between 1 and the job's GPUs ({gpus})"
            if gpus
            else f"--processes {processes}: at least 1"
        )
    return gpus, processes


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    try:
        fmt_name = train_format(args)
        args.protocol = protocol(args)
        args.template_kwargs = template_kwargs()
        ds = deepspeed_config(args)
        if args.qlora and not args.lora_r:
            raise ValueError("--qlora trains LoRA adapters: give --lora-r too")
        if args.train_judge and not args.train_judge_model:
            raise ValueError("--train-judge needs --train-judge-model (the model that endpoint serves)")
        gpus, processes = devices(args)
    except ValueError as e:
        log(f"error: {e}")
        return 2
    launched = [*argv, "--train-format", fmt_name, "--protocol", args.protocol]
    if (cmd := launch_command(launched, processes, gpus > 0, ds)) is not None:
        log(f"{processes} process(es) on {f'{gpus} GPU(s)' if gpus else 'CPU'}: {' '.join(cmd)}")
        return subprocess.run(cmd).returncode
    if ds is not None and not gpus:
        deepspeed_on_cpu()
    device = f"{gpus} GPU(s), bf16" if gpus else f"CPU, fp32, {torch.get_num_threads()} threads"
    if fmt_name == "env_trajectories":
        return run_interactive(args, device)
    return run_static(args, fmt_name, device)


def run_interactive(args: argparse.Namespace, device: str) -> int:
    """env_trajectories: a2rl.reference.interactive plays the task's episodes for its stages."""
    args = with_defaults(args, "interactive")
    args.schedule = (
        None if args.no_schedule else Schedule([s for s in ("sft", "grpo") if getattr(args, f"{s}_steps") > 0])
    )
    log(
        f"task {os.environ.get('TASK', '?')}: env_trajectories, prompted as protocol {args.protocol}'s loop "
        f"(the task's env.py transcripts) grades, {device}"
    )
    code = interactive.run(
        args, Path(os.environ["MODEL_PATH"]), Path(os.environ["DATA_PATH"]), Path(os.environ["OUTPUT_DIR"])
    )
    SUBMITTER.wait()
    return code


def run_static(args: argparse.Namespace, fmt_name: str, device: str) -> int:
    """A static train.jsonl: SFT on the format's pairs, then GRPO with its reward (or the training judge's),
    submitting after each stage."""
    model_path, data_path = Path(os.environ["MODEL_PATH"]), Path(os.environ["DATA_PATH"])
    out = Path(os.environ["OUTPUT_DIR"])
    try:
        with open(data_path / "train.jsonl") as f:
            rows = [json.loads(line) for line in f if line.strip()]
        fmt = check_rows(fmt_name, rows)
    except (OSError, ValueError) as e:
        log(f"error: {e}")
        return 2
    route = fmt.routes[args.protocol]
    args = with_defaults(args, "static", route)
    reward, reward_info = route.reward, None
    if reward is None and args.train_judge:
        client = ChatClient(args.train_judge, args.train_judge_model, api_key=os.environ.get(TRAIN_JUDGE_KEY_ENV))
        reward, reward_info = judge_reward(client), {"judge": {"base_url": client.base_url, "model": client.model}}
    grpo = args.grpo_steps > 0 and reward is not None
    args.schedule = None if args.no_schedule else Schedule(["sft"] * (args.sft_steps > 0) + ["grpo"] * grpo)
    log(
        f"task {os.environ.get('TASK', '?')}: {len(rows)} train rows, format {fmt_name} {{{', '.join(fmt.fields)}}}, "
        f"prompted as protocol {args.protocol} grades, base model {model_path}, {device}"
    )
    start = model_path
    if args.sft_steps > 0:
        log(f"stage sft: {args.sft_steps} steps")
        chat = Chat(AutoTokenizer.from_pretrained(model_path), args.template_kwargs)
        start = sft_stage(args, model_path, route.sft_pairs(rows, chat), out, max_length=route.max_length)
        submit(start)
    if args.grpo_steps > 0 and not grpo:
        why = "these rows are scored by a judge model, no rule reward stands in for it, and no --train-judge is set"
        log(f"stage grpo skipped: {why}")
        stage = Stage(
            name="grpo",
            hyperparameters={},
            steps=0,
            planned_steps=args.grpo_steps,
            wall_s=0.0,
            model_dir=None,
            skipped=why,
        )
        record_stage(out, stage)
    elif grpo:
        log(
            f"stage grpo: {args.grpo_steps} steps from {start}"
            + (f", rewards from the judge at {args.train_judge}" if reward_info else "")
        )
        try:
            chat = Chat(AutoTokenizer.from_pretrained(start), args.template_kwargs)
            submit(grpo_stage(args, start, route.grpo_rows(rows, chat), reward, out, reward_info=reward_info))
        except JudgeError as e:  # the training judge is down or misconfigured: what SFT submitted stands
            SUBMITTER.wait()
            log(f"error: stage grpo: the training judge failed: {e}")
            return 1
    SUBMITTER.wait()
    log("done")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
