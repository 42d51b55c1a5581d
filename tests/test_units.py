"""One set of byte units (a2rl/units.py): no module defines its own, and the storage figures a user reads (the
HTTP 507 answer, `a2rl status`'s breakdown, validate's refusal) say which unit each number is in."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from a2rl.recording.diskuse import DiskUse
from a2rl.run.submit import OverStorageBudget
from a2rl.spec.sizing import storage_problems
from a2rl.spec.sweep import SweepSpec
from a2rl.units import GIB, MIB

PKG = Path(__file__).resolve().parent.parent / "a2rl"
UNIT_NAME = re.compile(r"[KMGT]I?B")
# a power of two spelled out where a byte unit is meant: 2**20, 2 ** 30, 1 << 30, 1024 ** 3 ...
POWERS = {("Pow", 2, 20), ("Pow", 2, 30), ("LShift", 1, 30), ("Pow", 1024, 2), ("Pow", 1024, 3)}
NOT_BYTES = {"tasklib/envs.py", "reference/interactive.py"}  # 1 << 30: a context length, where a model states none


def spelled_units(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Assign):
            out += [f"{t.id} =" for t in node.targets if isinstance(t, ast.Name) and UNIT_NAME.fullmatch(t.id)]
        elif (
            isinstance(node, ast.BinOp)
            and isinstance(node.left, ast.Constant)
            and isinstance(node.right, ast.Constant)
            and (type(node.op).__name__, node.left.value, node.right.value) in POWERS
        ):
            out.append(ast.unparse(node))
    return out


def test_byte_units_are_defined_once():
    found = {
        str(p.relative_to(PKG)): spelled
        for p in PKG.rglob("*.py")
        if (spelled := spelled_units(p)) and str(p.relative_to(PKG)) not in {"units.py", *NOT_BYTES}
    }
    assert not found, f"use a2rl/units.py's constants: {found}"
    assert GIB == 1024 * MIB == 2**30


def figures_without_unit(text: str) -> list[str]:
    """Decimal figures (x.yz) not followed by a unit."""
    return re.findall(r"\d+\.\d+(?! ?(?:GiB|MiB|B parameters))\b", text)


def test_every_storage_figure_says_its_unit():
    over = OverStorageBudget(used=3 * GIB, needed=GIB // 2, allowed=3 * GIB + GIB // 4)
    assert not figures_without_unit(over.answer()["error"]), over.answer()["error"]
    assert "needs 0.50 GiB" in over.answer()["error"] and "keeps 3.00 GiB of its 3.25 GiB" in over.answer()["error"]
    use = DiskUse(frozen=GIB, frozen_copies=1, run_dir=GIB // 4, blobs=GIB // 2)
    assert use.describe() == ("1.75 GiB (1 frozen submission(s) 1.00 GiB, code blobs 0.50 GiB, run directory 0.25 GiB)")
    spec = SweepSpec(
        name="s", tasks=["arith"], agents=["baseline"], models=["builtin:tiny-llama"], budget=60, storage={"run_gb": 1}
    )
    (problem,) = storage_problems(spec, {"qwen7b": 7_615_616_512})
    assert not figures_without_unit(problem), problem
    assert "raise storage.run_gb to at least 28.4 GiB, or leave it unset (default 43.6 GiB)" in problem
