"""Split ALFWorld's json_2.1.1 folder: train/ games visible to the agent, valid_unseen/ (134 games) graded.

`source` is the json_2.1.1 folder that `alfworld-download` fetches from GitHub (not reachable from every site).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import a2rl.tasklib.envs


def prepare(train_dir: Path, heldout_dir: Path, source: Path | None = None) -> None:
    if source is None:
        raise RuntimeError("run `pip install alfworld && alfworld-download`, then "
                           "`a2rl prepare alfworld --source ~/.cache/alfworld/json_2.1.1`")
    shutil.copytree(Path(source) / "train", Path(train_dir) / "games")
    shutil.copytree(Path(source) / "valid_unseen", Path(heldout_dir) / "games")
    for name in ("env.py", "react_prompts.json"):
        shutil.copyfile(Path(__file__).with_name(name), Path(train_dir) / name)
    shutil.copyfile(a2rl.tasklib.envs.__file__, Path(train_dir) / "react.py")
