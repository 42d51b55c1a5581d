"""(Not alfworld.py: that name would shadow the alfworld package.) Parity fixture for alfworld's `paper` protocol, from
the reference's own evaluation: RD-Agent's rdagent/scenarios/rl/autorl_bench/benchmarks/alfworld/eval.py,
ALFWorldEvaluator.run_eval run unchanged (its base_config.yaml, react_prompts.json, AlfredTWEnv game filter, prompt and
alfworld_run loop) on ALFWorld 0.4.2.

ALFWorld's game data (alfworld-download, GitHub releases) is not reachable here, so the games are written by this
script: small ALFRED PDDL problems over the domain and grammar that the alfworld package ships (alfworld/data),
in the game.tw-pddl layout AlfredTWEnv loads, plus folders its filter must skip (movable, sliced, unknown type,
unsolvable). Stand-ins, each named: the model (create_llm_fn returns scripted raw completions, cut at the stop as
vLLM does), the data location (the reference's _ensure_alfworld_data), BaseEvaluator (get_default_result).

Recreate the venv: python -m venv /tmp/alfvenv && /tmp/alfvenv/bin/pip install alfworld==0.4.2 textworld==1.7.0
pyyaml; clone RD-Agent (git clone https://github.com/microsoft/RD-Agent; git checkout 471eb30d). Then:
    /tmp/alfvenv/bin/python tools/parity/alfworld_episodes.py /path/to/RD-Agent
Writes tests/fixtures/parity/alfworld.json and the games under tests/fixtures/parity/alfworld/valid_unseen/.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import types
from pathlib import Path

from common import FIXTURES, upstream_functions, write_fixture

EVAL = Path("rdagent/scenarios/rl/autorl_bench/benchmarks/alfworld/eval.py")
GAMES = FIXTURES / "alfworld" / "valid_unseen"

PROBLEM = """(define (problem plan_parity_{n})
(:domain alfred)
(:objects
agent1 - agent
AppleType - otype
CounterTopType - rtype
FridgeType - rtype
apple_bar__plus_00_dot_10 - object
countertop_bar__plus_01_dot_00 - receptacle
fridge_bar__plus_02_dot_00 - receptacle
loc_bar_start - location
loc_bar_counter - location
loc_bar_fridge - location
)
(:init
(atLocation agent1 loc_bar_start)
(receptacleAtLocation countertop_bar__plus_01_dot_00 loc_bar_counter)
(receptacleAtLocation fridge_bar__plus_02_dot_00 loc_bar_fridge)
(receptacleType countertop_bar__plus_01_dot_00 CounterTopType)
(receptacleType fridge_bar__plus_02_dot_00 FridgeType)
(openable fridge_bar__plus_02_dot_00)
(objectType apple_bar__plus_00_dot_10 AppleType)
(pickupable apple_bar__plus_00_dot_10)
(coolable apple_bar__plus_00_dot_10)
(inReceptacle apple_bar__plus_00_dot_10 {start})
(objectAtLocation apple_bar__plus_00_dot_10 {start_loc})
(canContain FridgeType AppleType)
(canContain CounterTopType AppleType)
)
(:goal (and {goal}))
)
"""
IN = (
    "(exists (?r - receptacle) (exists (?o - object) (and (inReceptacle ?o ?r) (objectType ?o AppleType) "
    "(receptacleType ?r {rtype}Type){extra})))"
)

# game folder → (task text, where the apple starts, goal, solvable, raw completions the model writes in turn; the
# last repeats once they run out). Folders without a goal exist only for AlfredTWEnv's filter.
GAMES_SPEC = {
    "pick_and_place_simple-Apple-None-Fridge-1": (
        "put an apple in fridge.",
        "counter",
        IN.format(rtype="Fridge", extra=""),
        True,
        [
            " think: The apple is likely on the countertop.\nOK.",
            " go to countertop 1",
            "take apple 1 from countertop 1",
            " go to fridge 1\n> open fridge 1",
            " open fridge 1",
            " put apple 1 in/on fridge 1",
            " think: that did nothing; ALFWorld wants move.",
            " move apple 1 to fridge 1",
        ],
    ),
    "pick_and_place_simple-Apple-None-CounterTop-2": (
        "put some apple on countertop.",
        "fridge",
        IN.format(rtype="CounterTop", extra=""),
        True,
        [
            " go to fridge 1",
            " open fridge 1",
            " take apple 1 from fridge 1",
            " go to countertop 1",
            " put apple 1 in/on countertop 1",
        ],
    ),
    "pick_cool_then_place_in_recep-Apple-None-CounterTop-3": (
        "cool some apple and put it in countertop.",
        "counter",
        IN.format(rtype="CounterTop", extra=" (isCool ?o)"),
        True,
        [
            " go to countertop 1",
            " take apple 1 from countertop 1",
            " go to fridge 1",
            " cool apple 1 with fridge 1",
            " go to countertop 1",
            " move apple 1 to countertop 1",
            " look",
        ],
    ),
    "pick_and_place_with_movable_recep-Apple-Bowl-Fridge-4": None,
    "pick_heat_then_place_in_recep-AppleSliced-None-Fridge-5": None,
    "pick_and_place_simple-Apple-None-Fridge-6": False,  # marked unsolvable
}
TASK_TYPE = {
    "pick_and_place": "pick_and_place_simple",
    "pick_cool": "pick_cool_then_place_in_recep",
    "pick_heat": "pick_heat_then_place_in_recep",
}


def write_games(data: Path) -> None:
    logic = Path(importlib.util.find_spec("alfworld").origin).parent / "data"
    for n, (folder, spec) in enumerate(GAMES_SPEC.items()):
        game = data / folder / "trial_T1"
        game.mkdir(parents=True)
        task_type = next(t for p, t in TASK_TYPE.items() if folder.startswith(p))
        (game / "traj_data.json").write_text(json.dumps({"task_type": task_type}))
        if not spec:
            (game / "game.tw-pddl").write_text(json.dumps({"solvable": False}))
            continue
        task, start, goal, solvable, _ = spec
        receptacle = {"counter": "countertop_bar__plus_01_dot_00", "fridge": "fridge_bar__plus_02_dot_00"}[start]
        problem = PROBLEM.format(n=n, start=receptacle, start_loc=f"loc_bar_{start}", goal=goal)
        grammar = (logic / "alfred.twl2").read_text().replace("UNKNOWN GOAL.", task)
        (game / "game.tw-pddl").write_text(
            json.dumps(
                {
                    "pddl_domain": (logic / "alfred.pddl").read_text(),
                    "grammar": grammar,
                    "pddl_problem": problem,
                    "solvable": solvable,
                },
                indent=0,
            )
        )


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    repo = Path(sys.argv[1])
    source = repo / EVAL
    shutil.rmtree(GAMES.parent, ignore_errors=True)
    write_games(GAMES)
    home = Path(tempfile.mkdtemp(prefix="alfparity-"))
    (home / "json_2.1.1").mkdir()
    os.symlink(GAMES, home / "json_2.1.1" / "valid_unseen")
    shutil.copytree(Path(importlib.util.find_spec("alfworld").origin).parent / "data", home / "logic")
    os.environ["HOME"] = str(home)  # the reference's _ensure_alfworld_data looks in ~/.cache/alfworld
    (home / ".cache").mkdir()
    os.symlink(home, home / ".cache" / "alfworld")

    calls: list[dict] = []

    def create_llm_fn(backend, model_path, **kwargs):  # stand-in for vLLM: the scripted raw completions
        def llm(prompt, stop=None):
            spec = next(s for s in GAMES_SPEC.values() if s and f"Your task is to: {s[0]}\n>" in prompt)
            mine = [c for c in calls if c["task"] == spec[0]]
            raw = spec[4][min(len(mine), len(spec[4]) - 1)]
            cut = min((i for s in stop if (i := raw.find(s)) >= 0), default=len(raw))
            calls.append({"task": spec[0], "prompt": prompt, "stop": stop, "raw": raw})
            return raw[:cut]

        return llm, lambda: None

    data = types.ModuleType("data")
    data._ensure_alfworld_data = lambda: home
    sys.modules["rdagent.scenarios.rl.autorl_bench.benchmarks.alfworld.data"] = data
    base = type("BaseEvaluator", (), {"get_default_result": lambda self, bid, path: {"benchmark": bid}})
    up = upstream_functions(
        source,
        ["_Tee", "_log", "process_ob", "alfworld_run", "ALFWorldEvaluator"],
        {
            "BaseEvaluator": base,
            "create_llm_fn": create_llm_fn,
            "LOG_DIR": home / "log",
            "__file__": str(source),
            "TASK_PREFIXES": {
                "pick_and_place": "put",
                "pick_clean_then_place": "clean",
                "pick_heat_then_place": "heat",
                "pick_cool_then_place": "cool",
                "look_at_obj": "examine",
                "pick_two_obj": "puttwo",
            },
        },
    )
    evaluator = up["ALFWorldEvaluator"].__new__(up["ALFWorldEvaluator"])
    evaluator.benchmark_id, evaluator.eval_config = "alfworld", {}
    result = evaluator.run_eval("/nonexistent-model", str(home), backend="vllm")
    sys.stdout = sys.__stdout__
    played = {c["task"] for c in calls}  # every game AlfredTWEnv kept is played; a skipped one has no task text
    kept = [folder for folder, spec in GAMES_SPEC.items() if spec and spec[0] in played]
    heads = {}  # each game's first prompt; every later one extends it
    for c in calls:
        heads.setdefault(c["task"], c["prompt"])
    commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    write_fixture(
        "alfworld",
        {
            "upstream": f"microsoft/RD-Agent {commit.strip() or '?'}: {EVAL} "
            f"(ALFWorldEvaluator.run_eval, alfworld_run) on alfworld {_version('alfworld')}, "
            f"textworld {_version('textworld')}; stand-ins: vLLM "
            "(scripted completions cut at its stop), the data location, BaseEvaluator.get_default_result",
            "kept": kept,
            "score": result["score"],
            "summary": result["accuracy_summary"],
            "heads": heads,
            "cases": [
                {
                    "task": c["task"],
                    "history": c["prompt"].removeprefix(heads[c["task"]]),
                    "stop": c["stop"],
                    "raw": c["raw"],
                }
                for c in calls
            ],
        },
    )


def _version(name: str) -> str:
    import importlib.metadata

    return importlib.metadata.version(name)


if __name__ == "__main__":
    main()
