"""Generate the textworld task offline: Coin Collector games (`tw-make tw-coin_collector`, levels 2-6: the coin
is 1-5 rooms away and the first observation says the way), train and held-out disjoint. Train games come from
fixed seeds (train_<seed>: the same everywhere); held-out games from seeds drawn from a secret seed of this data
root's (heldout/SEED, tasklib/taskdata.py), so the agent, which has textworld for training, cannot regenerate
them from the train games' seeds or the public code.

train/: games/*.z8 (+ .json), env.py and react.py (the environment and the grader's ReAct loop) and
trajectories.jsonl (the walkthrough of every training game, replayed to success). heldout/: games/ only.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator

import a2rl.tasklib.envs
from a2rl.tasklib.taskdata import heldout_seed, write_jsonl

tw = a2rl.tasklib.envs.load_module(Path(__file__).with_name("env.py"), "a2rl_task_textworld_env")

N_TRAIN = 48
N_HELDOUT = 16
LEVELS = (2, 3, 4, 5, 6)  # a train game's level is LEVELS[seed % 5], a held-out game's LEVELS[i % 5]: both mix
TRAIN_SEED = 1000  # train games: seeds 1000, 1001, ...
WORKERS = 4  # tw-make mostly waits on its compiler: 4 at a time fill 2 cores


def _walkthrough(game: Path) -> list[str]:
    return json.loads(game.with_suffix(".json").read_text())["metadata"]["walkthrough"]


def _identity(game: Path) -> str:
    """What makes two games the same game: their world (map, objects) and its names. Walkthroughs repeat across
    games (a level-2 game has one of four), so they cannot tell games apart."""
    data = json.loads(game.with_suffix(".json").read_text())
    return hashlib.sha256(json.dumps([data["world"], data["infos"]], sort_keys=True).encode()).hexdigest()


def _tw_make(path: Path, seed: int, cache: Path | None, level: int | None = None) -> str:
    """Generate one game (or copy it from `cache`, games this script generated before); its identity."""
    if cache and (cache / path.name).is_file():
        for suffix in (".z8", ".json"):
            shutil.copyfile(cache / path.with_suffix(suffix).name, path.with_suffix(suffix))
        return _identity(path)
    level = LEVELS[seed % len(LEVELS)] if level is None else level
    tw_make = shutil.which("tw-make", path=str(Path(sys.executable).parent)) or "tw-make"
    subprocess.run(
        [
            tw_make,
            "tw-coin_collector",
            "--level",
            str(level),
            "--seed",
            str(seed),
            "--output",
            str(path),
            "--silent",
            "-f",
        ],
        check=True,
        capture_output=True,
    )
    path.with_suffix(".ni").unlink(missing_ok=True)  # Inform source: not needed to play
    return _identity(path)


def _generate(games: Path, plan: Iterator[tuple[str, int, int]], n: int, taken: set[str], cache: Path | None) -> None:
    """n games from `plan`'s (name, seed, level) that differ from each other and from `taken`."""
    games.mkdir(parents=True, exist_ok=True)
    kept = 0
    with ThreadPoolExecutor(WORKERS) as pool:
        while kept < n:
            batch = [next(plan) for _ in range(n - kept)]
            paths = [games / f"{name}.z8" for name, _, _ in batch]
            made = pool.map(
                _tw_make, paths, [seed for _, seed, _ in batch], [cache] * len(batch), [level for _, _, level in batch]
            )
            for path, identity in zip(paths, made):
                if identity in taken:
                    path.unlink()
                    path.with_suffix(".json").unlink()
                else:
                    taken.add(identity)
                    kept += 1


def _train_plan() -> Iterator[tuple[str, int, int]]:
    seed = TRAIN_SEED
    while True:
        yield f"train_{seed}", seed, LEVELS[seed % len(LEVELS)]
        seed += 1


def _heldout_plan(heldout_dir: Path, source: Path | None) -> Iterator[tuple[str, int, int]]:
    """The source's held-out games first (copied as they are), then games from secret seeds, named by index
    only (heldout_000: the name says nothing of the seed)."""
    given = sorted(p.stem for p in source.glob("heldout_*.z8")) if source else []
    rng: random.Random | None = None
    i = 0
    while True:
        if i < len(given):
            yield given[i], 0, 0  # copied from the source by name
        else:
            rng = rng or random.Random(heldout_seed(heldout_dir))
            yield f"heldout_{i:03d}", rng.randrange(2**31), LEVELS[i % len(LEVELS)]
        i += 1


def expert_trajectory(data_dir: Path, episode_id: str) -> dict:
    """The game's walkthrough replayed in the environment, with the grader's prompt for every step."""
    env = tw.make_env(data_dir, episode_id)
    try:
        episode = a2rl.tasklib.envs.replay(env, _walkthrough(data_dir / episode_id))
    finally:
        env.close()
    if not episode.won:
        raise RuntimeError(f"{episode_id}: the walkthrough does not win")
    return a2rl.tasklib.envs.trajectory_record(episode_id, episode, tw.HEADER, "walkthrough")


def prepare(train_dir: Path, heldout_dir: Path, source: Path | None = None) -> None:
    """`source`: a folder of games generated by this script before, reused as they are: train_<seed>.z8 (+ .json)
    by seed, and its heldout_*.z8 as the held-out games (as secret as that folder is kept)."""
    train_dir, heldout_dir = Path(train_dir), Path(heldout_dir)
    taken: set[str] = set()
    _generate(train_dir / "games", _train_plan(), N_TRAIN, taken, source)
    _generate(heldout_dir / "games", _heldout_plan(heldout_dir, source), N_HELDOUT, taken, source)
    shutil.copyfile(Path(__file__).with_name("env.py"), train_dir / "env.py")
    shutil.copyfile(a2rl.tasklib.envs.__file__, train_dir / "react.py")
    write_jsonl(
        train_dir / "trajectories.jsonl", [expert_trajectory(train_dir, e) for e in tw.train_episodes(train_dir)]
    )
