"""Generate the arith task data: synthetic one-step arithmetic word problems, fully offline.

Convention (shared with evaluator.py and description.md): the prompt is
"Question: <problem>\nAnswer:" and the expected completion is " <integer>" then a newline.
"""

from __future__ import annotations

import random
from pathlib import Path

from a2rl.tasklib.taskdata import write_synthetic_splits

SEED = 20261122
N_TRAIN = 2000
N_HELDOUT = 200

NAMES = ["Tom", "Anna", "Ben", "Lucy", "Sam", "Mia", "Leo", "Emma", "Max", "Zoe", "Jack", "Lily"]
ITEMS = ["apples", "oranges", "cookies", "marbles", "books", "pencils", "stickers", "cards", "coins", "shells"]

# (template, operation). Operands a, b are drawn so every answer is a non-negative integer.
TEMPLATES = [
    ("{name} has {a} {item} and buys {b} more. How many {item} does {name} have?", "add"),
    ("{name} picks {a} {item} in the morning and {b} in the afternoon. How many {item} did {name} pick?", "add"),
    ("A box holds {a} {item}. {name} puts in {b} more. How many {item} are in the box?", "add"),
    ("{name} has {a} {item} and gives {b} to a friend. How many {item} does {name} have left?", "sub"),
    ("There are {a} {item} in a basket. {name} takes {b} of them. How many {item} are left?", "sub"),
    ("{name} had {a} {item} and now has {b}. How many {item} did {name} get?", "diff"),
]
MAX_OPERAND = 10


def make_problem(rng: random.Random) -> dict[str, str]:
    template, op = rng.choice(TEMPLATES)
    x, y = rng.randint(0, MAX_OPERAND), rng.randint(0, MAX_OPERAND)
    if op == "add":
        a, b, answer = x, y, x + y
    elif op == "sub":  # take away b from a: a >= b
        a, b = max(x, y), min(x, y)
        answer = a - b
    else:  # "had a, now has b": b >= a
        a, b = min(x, y), max(x, y)
        answer = b - a
    question = template.format(name=rng.choice(NAMES), item=rng.choice(ITEMS), a=a, b=b)
    return {"prompt": f"Question: {question}\nAnswer:", "answer": str(answer)}


def prepare(train_dir: Path, heldout_dir: Path) -> None:
    write_synthetic_splits(
        train_dir, heldout_dir, make_problem, "prompt", seed=SEED, n_train=N_TRAIN, n_heldout=N_HELDOUT
    )
