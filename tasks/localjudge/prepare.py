"""Generate the localjudge data: short synthetic instructions with terse, correct reference answers, offline.

Each kind of instruction has a checkable answer, so a capable judge can tell a right answer from a wrong one;
the references are bare (no sentence around them), leaving room for a policy to beat them.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

from a2rl.tasklib.taskdata import write_synthetic_splits

SEED = 20261123
N_TRAIN = 2000
N_HELDOUT = 200

COLORS = ["red", "blue", "green", "yellow", "white", "black"]
FRUITS = ["apple", "orange", "pear", "banana"]
NAMES = ["Tom", "Anna", "Ben", "Lucy", "Sam", "Mia", "Leo", "Emma", "Max", "Zoe", "Jack", "Lily"]
WORDS = [
    "apple",
    "orange",
    "cookie",
    "marble",
    "pencil",
    "basket",
    "garden",
    "market",
    "friend",
    "teacher",
    "school",
    "flower",
    "sister",
    "brother",
    "morning",
    "evening",
    "yellow",
    "number",
    "answer",
    "question",
]


def _add(rng: random.Random) -> tuple[str, str]:
    a, b = rng.randint(0, 20), rng.randint(0, 20)
    return f"What is {a} plus {b}?", str(a + b)


def _sub(rng: random.Random) -> tuple[str, str]:
    a, b = sorted((rng.randint(0, 20), rng.randint(0, 20)), reverse=True)
    return f"What is {a} minus {b}?", str(a - b)


def _count(rng: random.Random) -> tuple[str, str]:
    a = rng.randint(0, 20)
    b = a + rng.randint(2, 6)
    return f"Count from {a} to {b}.", ", ".join(map(str, range(a, b + 1)))


def _bigger(rng: random.Random) -> tuple[str, str]:
    a, b = rng.sample(range(100), 2)
    return f"Which number is bigger, {a} or {b}?", str(max(a, b))


def _sort(rng: random.Random) -> tuple[str, str]:
    xs = rng.sample(range(50), rng.randint(3, 5))
    return f"Put these numbers in order from small to big: {', '.join(map(str, xs))}.", ", ".join(map(str, sorted(xs)))


def _even(rng: random.Random) -> tuple[str, str]:
    a = rng.randint(0, 99)
    return f"Is {a} an even number? Answer yes or no.", "Yes" if a % 2 == 0 else "No"


def _backwards(rng: random.Random) -> tuple[str, str]:
    w = rng.choice(WORDS + FRUITS + COLORS)
    return f"Write the word {w} backwards.", w[::-1]


def _letters(rng: random.Random) -> tuple[str, str]:
    w = rng.choice(WORDS + FRUITS + COLORS)
    return f"How many letters are in the word {w}?", str(len(w))


def _name_some(rng: random.Random) -> tuple[str, str]:
    kind, pool = rng.choice([("colors", COLORS), ("fruits", FRUITS)])
    n = rng.randint(2, len(pool) - 1)
    return f"Name {n} {kind}.", ", ".join(rng.sample(pool, n))


def _give(rng: random.Random) -> tuple[str, str]:
    name, item = rng.choice(NAMES), rng.choice(FRUITS)
    a, b = rng.randint(2, 12), rng.randint(1, 12)
    return f"{name} has {a + b} {item}s and gives {b} away. How many {item}s are left?", str(a)


KINDS: list[Callable[[random.Random], tuple[str, str]]] = [
    _add,
    _sub,
    _count,
    _bigger,
    _sort,
    _even,
    _backwards,
    _letters,
    _name_some,
    _give,
]


def _row(rng: random.Random) -> dict[str, str]:
    instruction, reference = rng.choice(KINDS)(rng)
    return {"instruction": instruction, "reference": reference}


def prepare(train_dir: Path, heldout_dir: Path) -> None:
    write_synthetic_splits(train_dir, heldout_dir, _row, "instruction", seed=SEED, n_train=N_TRAIN, n_heldout=N_HELDOUT)
