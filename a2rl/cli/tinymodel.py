"""`a2rl build-tiny-model OUT_DIR`: build the tiny random-init Llama and BPE tokenizer fully offline (the base
model of CPU demos and tests; same seed, byte-identical weights)."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("out_dir", type=Path, help="directory to create (returned as is if already built)")
    p.add_argument("--seed", type=int, default=0, help="weight-init seed (same seed => identical weights)")


def run(args: argparse.Namespace) -> int:
    from a2rl.store.tinymodel import build_tiny_model

    print(build_tiny_model(args.out_dir, seed=args.seed))
    return 0
