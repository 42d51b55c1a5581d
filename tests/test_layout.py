"""The package layout follows the data flow, and imports only point down it (README "Layout", docs/development.md
"Layers"). A module importing from a later stage, or the monitor writing records, fails here."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "a2rl"
# earlier layers never import later ones; a layer may import itself
# (reporting reads what runs and graders recorded; they tell it through a result hook scheduling passes them)
LAYERS = [
    {"errors", "records", "upgrades", "version", "httpjson", "siteproxy", "weights", "units"},
    {"spec"},
    {"store"},
    {"llm"},
    {"tasklib"},
    {"recording"},
    {"grading"},
    {"drivers"},
    {"run"},
    {"reporting"},
    {"inspector"},
    {"scheduling"},
    {"reference"},
    {"cli", "launch", "aggregate", "__main__", "api"},
]


def layer(name: str) -> int:
    return next(i for i, names in enumerate(LAYERS) if name in names)


def a2rl_imports(path: Path) -> list[str]:
    """The first component under a2rl of every a2rl module `path` imports (at any depth in the file)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("a2rl."):
            out.append(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            out += [a.name.split(".")[1] for a in node.names if a.name.startswith("a2rl.")]
    return out


def test_every_module_belongs_to_a_layer():
    tops = {p.relative_to(PKG).parts[0].removesuffix(".py") for p in PKG.rglob("*.py")} - {"__init__"}
    unknown = [t for t in tops if not any(t in names for names in LAYERS)]
    assert not unknown, f"a2rl/{unknown}: add it to LAYERS (and the README's layout table)"


def test_imports_point_one_way():
    upward = []
    for path in PKG.rglob("*.py"):
        own = path.relative_to(PKG).parts[0].removesuffix(".py")
        if own == "__init__":
            continue
        upward += [
            f"{path.relative_to(PKG.parent)} imports a2rl.{m}" for m in a2rl_imports(path) if layer(m) > layer(own)
        ]
    assert not upward, "imports against the flow:\n" + "\n".join(sorted(upward))


def test_only_results_writes_result_json():
    writers = [
        p.relative_to(PKG.parent)
        for p in PKG.rglob("*.py")
        if p.name != "results.py"
        and "result_path" in p.read_text()
        and any(
            w in p.read_text() for w in ("publish_once(sweep.result_path", ".dump(sweep.result_path", ".dump(path)")
        )
        and "RunResult" in p.read_text()
    ]
    assert not writers, f"result.json has one writer, store/results.py; also written by {writers}"


def test_the_monitor_only_reads():
    """collect() is a read; reaping lost runs is the explicit reap_lost(), and it writes through store.results."""
    tree = ast.parse((PKG / "scheduling" / "monitor.py").read_text())
    collect = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "collect")
    called = {
        n.func.id if isinstance(n.func, ast.Name) else n.func.attr for n in ast.walk(collect) if isinstance(n, ast.Call)
    }
    assert not called & {"mark_lost", "dump", "publish_once", "write_result", "atomic_write_text"}


def test_the_main_types_say_what_they_are():
    from a2rl.grading.daemon import GradingDaemon
    from a2rl.run.budget import Budget
    from a2rl.run.job import AgentRun
    from a2rl.scheduling.launcher import Launcher
    from a2rl.store.queue import SubmissionQueue
    from a2rl.store.sweepdir import SweepDir

    undocumented = [
        c.__name__
        for c in (AgentRun, Launcher, GradingDaemon, SweepDir, SubmissionQueue, Budget)
        if not (c.__doc__ or "").strip()
    ]
    assert not undocumented


def test_tasks_use_one_surface():
    """Task folders import a2rl.tasklib and a2rl.llm only, and each evaluator matches tasklib/evaluator.py's
    contract (generator, heldout_dir, options; `engine` the only keyword)."""
    wrong = []
    for path in sorted((PKG.parent / "tasks").glob("*/*.py")):
        wrong += [
            f"{path.relative_to(PKG.parent)} imports a2rl.{m}"
            for m in a2rl_imports(path)
            if m not in ("tasklib", "llm")
        ]
        if path.name == "evaluator.py":
            fn = next(
                n for n in ast.parse(path.read_text()).body if isinstance(n, ast.FunctionDef) and n.name == "evaluate"
            )
            if [a.arg for a in fn.args.args] != ["generator", "heldout_dir", "options"] or {
                a.arg for a in fn.args.kwonlyargs
            } - {"engine"}:
                wrong.append(f"{path.relative_to(PKG.parent)}: evaluate() does not match a2rl.tasklib.evaluator")
    assert not wrong, "\n".join(wrong)


# what spec/ may not do: run a task's code, build a model, read weights (tasklib/prepare.py, tasklib/evaluator.py
# and store/modeldirs.py do)
SPEC_BANNED_IMPORTS = {
    "subprocess",
    "multiprocessing",
    "torch",
    "transformers",
    "safetensors",
    "tokenizers",
    "filelock",
}
SPEC_BANNED_CALLS = {"exec_module", "spec_from_file_location", "import_module", "exec", "eval", "prepare", "system"}


def spec_doings(spec_dir: Path) -> list[str]:
    """What the modules under `spec_dir` import or call that runs code, builds models or reads weights."""
    found = []
    for path in sorted(spec_dir.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Call):
                fn = node.func
                called = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else ""
                if called in SPEC_BANNED_CALLS:
                    found.append(f"{path.name}:{node.lineno} calls {called}()")
                continue
            else:
                continue
            banned = [n for n in names if n.split(".")[0] in SPEC_BANNED_IMPORTS or n == "a2rl.weights"]
            if banned:
                found.append(f"{path.name}:{node.lineno} imports {banned[0]}")
    return found


def test_spec_only_describes():
    """spec/ holds the typed description of sweeps, tasks, agents and models; doing things lives in later layers."""
    assert not spec_doings(PKG / "spec"), "\n".join(spec_doings(PKG / "spec"))


MAX_LINES = 500


def test_no_module_is_over_500_lines():
    sizes = {str(p.relative_to(PKG)): len(p.read_text().splitlines()) for p in PKG.rglob("*.py")}
    over = {m: n for m, n in sizes.items() if n > MAX_LINES}
    assert not over, f"split these modules (at most {MAX_LINES} lines each): {over}"


MAX_FUNCTION_LINES = 80


def test_no_function_is_over_80_lines():
    sizes = {
        f"{p.relative_to(PKG)}:{node.name}": node.end_lineno - node.lineno + 1
        for p in PKG.rglob("*.py")
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    }
    over = {f: n for f, n in sizes.items() if n > MAX_FUNCTION_LINES}
    assert not over, f"split these functions (at most {MAX_FUNCTION_LINES} lines each): {over}"


# Imports inside a function that would close a cycle: the scheduler factory picks its implementation at run time
LAZY_IMPORTS = {("a2rl.scheduling.base", "a2rl.scheduling.local"), ("a2rl.scheduling.base", "a2rl.scheduling.slurm")}


def imported_modules(path: Path) -> set[str]:
    """The a2rl modules `path` imports, at any depth (a lazy import still ties the modules), except for type
    checking only."""
    tree, out = ast.parse(path.read_text()), set()
    typing_only = {
        id(n)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and getattr(block.test, "id", None) == "TYPE_CHECKING"
        for n in ast.walk(block)
    }
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("a2rl"):
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)  # `from a2rl.x import module`
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("a2rl"))
    return out


def test_no_import_cycles():
    """No module imports one that imports it back, directly or through others (reference/pipeline.py and
    interactive.py did)."""
    modules = {
        ".".join(("a2rl", *p.relative_to(PKG).with_suffix("").parts)).removesuffix(".__init__"): p
        for p in PKG.rglob("*.py")
    }
    graph = {
        m: {n for n in imported_modules(p) & modules.keys() if n != m and (m, n) not in LAZY_IMPORTS}
        for m, p in modules.items()
    }
    cycles = []

    def visit(m: str, path: list[str], done: set[str]) -> None:
        if m in path:
            cycles.append(path[path.index(m) :] + [m])
            return
        if m in done:
            return
        for n in sorted(graph[m]):
            visit(n, [*path, m], done)
        done.add(m)

    done: set[str] = set()
    for m in sorted(graph):
        visit(m, [], done)
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)
