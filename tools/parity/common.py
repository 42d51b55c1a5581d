"""Shared by the parity scripts: where fixtures go, and how to run single functions of an upstream module whose
package cannot be imported whole here."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "parity"


def upstream_functions(path: Path, names: list[str], namespace: dict[str, Any] | None = None) -> dict[str, Any]:
    """The top-level functions and classes `names` of the upstream source file `path`, executed unchanged (their
    decorators, registrations in the package's registries, dropped) in a namespace with the file's stdlib imports
    and `namespace` (stand-ins for base classes of the package, which the named code must not use)."""
    tree = ast.parse(path.read_text())
    body = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)) and _stdlib(n)]
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in names:
            node.decorator_list = []
            body.append(node)
    found = {n.name for n in body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    if missing := set(names) - found:
        raise SystemExit(f"{path}: no {sorted(missing)} (upstream changed?)")
    scope = {"BaseEvaluator": object, **(namespace or {})}
    exec(compile(ast.Module(body=body, type_ignores=[]), str(path), "exec"), scope)
    return {name: scope[name] for name in names}


def _stdlib(node: ast.Import | ast.ImportFrom) -> bool:
    if isinstance(node, ast.ImportFrom):
        return node.level == 0 and node.module.split(".")[0] in sys.stdlib_module_names
    return all(a.name.split(".")[0] in sys.stdlib_module_names for a in node.names)


def write_fixture(name: str, data: dict) -> Path:
    FIXTURES.mkdir(parents=True, exist_ok=True)
    path = FIXTURES / f"{name}.json"
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {path} ({len(data.get('cases', []))} cases)")
    return path
