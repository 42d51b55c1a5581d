"""Prepared data remembers which prepare script wrote it: an edited script prepares again, an unchanged one not."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from a2rl.errors import SpecError
from a2rl.spec.tasks import get_task
from a2rl.tasklib.prepare import ensure_prepared

ECHO = Path(__file__).parent / "fixtures" / "tasks" / "echo"


def copy_echo(tmp_path: Path, *, offline: bool = True):
    """A private copy of the echo test task (its prepare.py is edited by the tests) and a data root."""
    folder = tmp_path / "tasks" / "echo"
    shutil.copytree(ECHO, folder, ignore=shutil.ignore_patterns("__pycache__"))
    if not offline:
        yaml = folder / "task.yaml"
        yaml.write_text(yaml.read_text().replace("offline: true", "offline: false"))
    return get_task("echo", [tmp_path / "tasks"]), folder / "prepare.py", tmp_path / "data"


def edit(prepare_py: Path) -> None:
    # A different length: Python's bytecode cache trusts a source file of the same size and mtime second.
    prepare_py.write_text(prepare_py.read_text().replace('"answer": "2"', '"answer": "two"'))


def test_edited_prepare_script_prepares_again(tmp_path):
    task, prepare_py, root = copy_echo(tmp_path)
    train = ensure_prepared(task, root).train_dir / "train.jsonl"
    first = task.prepared(root)
    mtime = train.stat().st_mtime_ns

    ensure_prepared(task, root)  # unchanged script: the data stays
    assert task.prepared(root) == first and train.stat().st_mtime_ns == mtime

    edit(prepare_py)
    assert task.prepared(root) is None  # stale, noticed without reloading the task
    ensure_prepared(task, root)
    again = task.prepared(root)
    assert again.prepared_at > first.prepared_at and again.prepare_fingerprint != first.prepare_fingerprint
    assert json.loads(train.read_text())["answer"] == "two" and again.checksums != first.checksums
    assert not list((root / "echo").glob(".prepare-*"))


def test_records_from_before_fingerprints_are_stale(tmp_path):
    task, _, root = copy_echo(tmp_path)
    ensure_prepared(task, root)
    record = root / "echo" / "prepared.json"
    old = json.loads(record.read_text())
    del old["prepare_fingerprint"]
    record.write_text(json.dumps({**old, "schema_version": 1}))
    assert task.prepared(root) is None
    ensure_prepared(task, root)
    assert task.prepared(root).prepared_at > old["prepared_at"]


def test_stale_data_of_an_online_task_is_an_error_that_says_why(tmp_path):
    task, prepare_py, root = copy_echo(tmp_path, offline=False)
    with pytest.raises(SpecError, match="'echo' is not prepared under"):
        ensure_prepared(task, root)
    ensure_prepared(task, root, allow_network=True)
    ensure_prepared(task, root)  # current: no network needed
    edit(prepare_py)
    with pytest.raises(
        SpecError, match="'echo' was prepared by another version of its prepare script.*a2rl prepare echo"
    ):
        ensure_prepared(task, root)
    ensure_prepared(task, root, allow_network=True)
    assert task.prepared(root) is not None


def test_every_shipped_task_has_a_fingerprint():
    """Each file a fingerprint covers exists (the shared ReAct loop moved once and the interactive tasks broke)."""
    from a2rl.spec.tasks import get_task, task_registry

    for name in task_registry().names():
        assert len(get_task(name).prepare_fingerprint()) == 64, name


def test_a_task_whose_engine_is_not_installed_names_the_extra(tmp_path):
    """textworld and alfworld need the `games` extra (compiled from source, left out of the default set-up): a
    task whose engine is missing refuses in one line before preparing or grading anything."""
    _, _, root = copy_echo(tmp_path)
    yaml = tmp_path / "tasks" / "echo" / "task.yaml"
    yaml.write_text(yaml.read_text() + "engines: [a2rl_no_such_engine]\n")
    with pytest.raises(SpecError) as e:
        ensure_prepared(get_task("echo", [tmp_path / "tasks"]), root)
    assert e.value.lines == [
        "task 'echo' needs a2rl_no_such_engine (the `games` extra; Fast Downward and jericho "
        "compile from source: cmake and a C/C++ compiler): "
        "A2RL_EXTRAS=train,test,tasks,games bash tools/setup-env.sh"
    ]
    assert not root.exists()
    for name in ("textworld", "alfworld"):  # the tasks that declare it
        assert get_task(name).spec.engines
