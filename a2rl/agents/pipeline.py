"""Reference agent without an LLM: SFT then GRPO with TRL, submitting after each stage.

Runs inside an agent workspace as `python -m a2rl.agents.pipeline [options]`, configured by the
job's environment: MODEL_PATH (base model), DATA_PATH (the task's train files), OUTPUT_DIR (writable),
GRADING_SERVER_URL (optional: without it submissions are skipped). The route follows the train files:
- train.jsonl with {"prompt", "answer"} rows (rule tasks): SFT on " <answer>" then a newline, then GRPO
  rewarding a sample whose first line equals the answer;
- train.jsonl with {"instruction", "reference"} rows (judge tasks): SFT on the reference answering the
  instruction in the grader's chat format; no GRPO, as no rule reward stands in for the judge;
- trajectories.jsonl (interactive tasks): a2rl.agents.interactive.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import datasets
import torch
import transformers
from datasets import Dataset
from transformers import (AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase, PrinterCallback,
                          TrainerCallback)
from trl import GRPOConfig, GRPOTrainer, SFTConfig, SFTTrainer

from a2rl.grading.judge import chat_prompt

# Job logs are files: progress bars only add carriage-return noise.
datasets.disable_progress_bars()
transformers.utils.logging.disable_progress_bar()

T0 = time.monotonic()


def log(msg: str) -> None:
    print(f"[pipeline {time.monotonic() - T0:6.1f}s] {msg}", flush=True)


class LogProgress(TrainerCallback):
    """One readable line per logging step."""

    def __init__(self, stage: str):
        self.stage = stage

    def on_log(self, args, state, control, logs=None, **kwargs):
        keys = ("loss", "reward", "reward_std", "learning_rate")
        shown = " ".join(f"{k} {logs[k]:.4g}" for k in keys if k in (logs or {}))
        if shown:
            log(f"{self.stage} step {state.global_step}/{state.max_steps} {shown}")


def first_line_reward(completions: list[str], answer: list[str], **kwargs) -> list[float]:
    return [float(c.split("\n", 1)[0].strip() == a.strip()) for c, a in zip(completions, answer)]


def load_rows(data_path: Path) -> list[dict[str, str]]:
    with open(data_path / "train.jsonl") as f:
        return [json.loads(line) for line in f if line.strip()]


def common_args(out: Path, steps: int, lr: float, seed: int) -> dict:
    # TRL defaults assume a GPU: bf16 is ~9x slower on this CPU and checkpointing only costs time.
    return dict(
        output_dir=str(out),
        max_steps=steps,
        learning_rate=lr,
        warmup_steps=max(1, steps // 20),  # fresh Adam moments make the first full-lr steps noisy
        seed=seed,
        bf16=False,
        activation_checkpointing=False,
        use_cpu=True,
        report_to="none",
        save_strategy="no",
        logging_steps=max(1, steps // 10),
        disable_tqdm=True,
    )


def train(trainer, stage: str) -> None:
    trainer.remove_callback(PrinterCallback)  # raw log dicts; LogProgress prints a readable line instead
    trainer.add_callback(LogProgress(stage))
    trainer.train()


def save(trainer, tokenizer, out: Path) -> Path:
    trainer.model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    log(f"saved {out}")
    return out


def submit(model_dir: Path) -> None:
    """Submit for grading; a failure is logged, never fatal (the next stage may still do better)."""
    if not os.environ.get("GRADING_SERVER_URL"):
        log("no grading server; skipping submit")
        return
    log(f"submitting {model_dir}")
    proc = subprocess.run([sys.executable, "-m", "a2rl", "submit", str(model_dir)], capture_output=True, text=True)
    print(proc.stdout + proc.stderr, end="", flush=True)
    if proc.returncode != 0:
        log(f"submit failed with exit code {proc.returncode}")


def sft_stage(args: argparse.Namespace, base: Path, pairs: list[dict[str, str]], out: Path, *,
              max_length: int = 256) -> Path:
    """SFT on {"prompt", "completion"} pairs (loss on the completion only); the model saved in out/sft."""
    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    config = SFTConfig(
        **common_args(out / "tmp" / "sft", args.sft_steps, args.sft_lr, args.seed),
        per_device_train_batch_size=args.sft_batch_size,
        completion_only_loss=True,
        max_length=max_length,
        lr_scheduler_type="cosine",
        adam_beta2=0.98,  # measured: the default 0.999 needs far more steps to learn arithmetic
    )
    trainer = SFTTrainer(model=model, args=config, train_dataset=Dataset.from_list(pairs), processing_class=tokenizer)
    train(trainer, "sft")
    return save(trainer, tokenizer, out / "sft")


def grpo_stage(args: argparse.Namespace, base: Path, rows: list[dict], reward_fn, out: Path, **config) -> Path:
    """GRPO on rows with a "prompt" (other columns reach reward_fn as kwargs); the model saved in out/grpo."""
    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    config = GRPOConfig(
        **common_args(out / "tmp" / "grpo", args.grpo_steps, args.grpo_lr, args.seed),
        # The batch counts completions: prompts_per_step groups of num_generations samples each.
        per_device_train_batch_size=args.grpo_prompts * args.num_generations,
        num_generations=args.num_generations,
        max_completion_length=args.max_completion_length,
        **config,
    )
    trainer = GRPOTrainer(
        model=model, reward_funcs=reward_fn, args=config, train_dataset=Dataset.from_list(rows), processing_class=tokenizer
    )
    train(trainer, "grpo")
    return save(trainer, tokenizer, out / "grpo")


def run_grpo(args: argparse.Namespace, base: Path, rows: list[dict[str, str]], out: Path) -> Path:
    return grpo_stage(args, base, [{"prompt": r["prompt"], "answer": r["answer"]} for r in rows], first_line_reward, out)


def answer_pairs(rows: list[dict[str, str]], tokenizer: PreTrainedTokenizerBase) -> list[dict[str, str]]:
    return [{"prompt": r["prompt"], "completion": f" {r['answer']}\n"} for r in rows]


def judge_pairs(rows: list[dict[str, str]], tokenizer: PreTrainedTokenizerBase) -> list[dict[str, str]]:
    """The instruction as the single user turn the grader prompts the policy with (a2rl.judge), answered by the
    reference and EOS: the grader's answer is everything generated up to EOS."""
    return [{"prompt": chat_prompt(tokenizer, [{"role": "user", "content": r["instruction"]}]),
             "completion": r["reference"] + tokenizer.eos_token} for r in rows]


@dataclass(frozen=True)
class StaticFormat:
    """A train.jsonl layout: the fields every row has, its SFT pairs, and its GRPO stage (None: no rule reward)."""
    fields: tuple[str, ...]
    sft_pairs: Callable[[list[dict[str, str]], PreTrainedTokenizerBase], list[dict[str, str]]]
    grpo: Callable[[argparse.Namespace, Path, list[dict[str, str]], Path], Path] | None


STATIC_FORMATS = (StaticFormat(("prompt", "answer"), answer_pairs, run_grpo),
                  StaticFormat(("instruction", "reference"), judge_pairs, None))


def data_format(rows: list[dict]) -> StaticFormat:
    """The format all rows share; an error naming the known formats otherwise."""
    for fmt in STATIC_FORMATS:
        if rows and all(set(fmt.fields) <= r.keys() for r in rows):
            return fmt
    seen = sorted({k for r in rows for k in r})
    known = ", ".join("{" + ", ".join(f.fields) + "}" for f in STATIC_FORMATS)
    raise ValueError(f"train.jsonl: no format this pipeline trains on (rows with fields {known}, or "
                     f"trajectories.jsonl for interactive tasks); its rows have fields {seen or 'none (no rows)'}")


# Defaults per route: static train.jsonl rows, or interactive games (trajectories.jsonl, a2rl.agents.interactive).
DEFAULTS = {
    "static": dict(sft_steps=700, sft_lr=3e-3, sft_batch_size=32, grpo_steps=150, grpo_lr=1e-4, grpo_prompts=8,
                   num_generations=8, max_completion_length=8),
    "interactive": dict(sft_steps=300, sft_lr=3e-3, sft_batch_size=8, grpo_steps=40, grpo_lr=1e-4, grpo_prompts=4,
                        num_generations=8, max_completion_length=16),
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m a2rl.agents.pipeline", description=__doc__)
    p.add_argument("--sft-steps", type=int, help="0 skips SFT (GRPO starts from MODEL_PATH)")
    p.add_argument("--sft-lr", type=float)
    p.add_argument("--sft-batch-size", type=int)
    p.add_argument("--grpo-steps", type=int, help="0 skips GRPO")
    p.add_argument("--grpo-lr", type=float, help="1e-3 collapses the tiny model")
    p.add_argument("--grpo-prompts", type=int, help="prompts per GRPO step")
    p.add_argument("--num-generations", type=int, help="samples per prompt (>= 2)")
    p.add_argument("--max-completion-length", type=int)
    p.add_argument("--seed", type=int, default=0)
    p.epilog = "Defaults per route: " + json.dumps(DEFAULTS)
    return p.parse_args(argv)


def with_defaults(args: argparse.Namespace, route: str) -> argparse.Namespace:
    for k, v in DEFAULTS[route].items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    model_path, data_path = Path(os.environ["MODEL_PATH"]), Path(os.environ["DATA_PATH"])
    out = Path(os.environ["OUTPUT_DIR"])
    if (data_path / "trajectories.jsonl").is_file():  # an interactive task: games, env.py, expert trajectories
        from a2rl.agents import interactive

        return interactive.run(with_defaults(args, "interactive"), model_path, data_path, out)
    args = with_defaults(args, "static")
    rows = load_rows(data_path)
    try:
        fmt = data_format(rows)
    except ValueError as e:
        log(f"error: {e}")
        return 2
    log(f"task {os.environ.get('TASK', '?')}: {len(rows)} train rows {{{', '.join(fmt.fields)}}}, "
        f"base model {model_path}, {torch.get_num_threads()} threads")
    start = model_path
    if args.sft_steps > 0:
        log(f"stage sft: {args.sft_steps} steps")
        start = sft_stage(args, model_path, fmt.sft_pairs(rows, AutoTokenizer.from_pretrained(model_path)), out)
        submit(start)
    if args.grpo_steps > 0 and fmt.grpo is None:
        log("stage grpo skipped: these rows are scored by a judge model, and no rule reward stands in for it")
    elif args.grpo_steps > 0:
        log(f"stage grpo: {args.grpo_steps} steps from {start}")
        submit(fmt.grpo(args, start, rows, out))
    log("done")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
