"""One deleter of frozen submission copies (recording/frozencopies.py): atomic (renamed to trash, then removed: a
crash leaves no copy with files missing that looks whole), idempotent, never following a symlink, and the only
code under a2rl/ that removes what lies in submissions/."""

from __future__ import annotations

import ast
import shutil
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from a2rl.grading import retention
from a2rl.recording import frozencopies as FC
from a2rl.recording.diskuse import frozen_copies, run_disk_use
from a2rl.store.sweepdir import SweepDir

PKG = Path(__file__).resolve().parent.parent / "a2rl"
REMOVALS = {"rmtree", "rmdir", "unlink", "remove", "removedirs"}
# Every other module that removes files, and what it removes (none of it under submissions/). A module added here
# must not remove a frozen copy, its scan or its partial freeze: those go through recording/frozencopies.py.
OTHER_REMOVERS = {
    "recording/archive.py": "its own temporary workspace archive",
    "reporting/runreport.py": "a stale report file",
    "reporting/viewer.py": "the viewer's output directory being replaced",
    "records.py": "a temporary file of an atomic write",
    "reference/schedule.py": "a stage from its list (no file)",
    "reference/stages.py": "a training pickle in the agent's own output",
    "run/audit.py": "the isolation audit's own workspace",
    "run/caps.py": "the run's emptied cgroup directories",
    "recording/snapshots.py": "a temporary blob",
    "run/job.py": "the run's resume copy; the workspace's WRAP_UP marker",
    "run/relay.py": "its socket",
    "run/sandbox.py": "the sandbox's own temporary directory",
    "run/workspace.py": "a workspace's partial data copy",
    "scheduling/fscheck.py": "a probe's report, once read",
    "store/integrity.py": "a temporary key file",
    "store/queue.py": "a lease, once its entry is finished",
    "store/tinymodel.py": "its temporary build directory",
    "tasklib/prepare.py": "a task's data being prepared again",
}


def removers() -> set[str]:
    out = set()
    for path in PKG.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in REMOVALS:
                out.add(str(path.relative_to(PKG)))
    return out


def test_only_the_helper_removes_frozen_copies():
    """A module that removes files itself is either the helper or a reviewed one that removes something else:
    a grader, retention or the freeze calling shutil.rmtree on a frozen copy again fails here."""
    found = removers() - {"recording/frozencopies.py"}
    assert not {m for m in found if m.startswith("grading/") or m == "run/artifacts.py"}, found
    assert found == set(OTHER_REMOVERS), "review and list in OTHER_REMOVERS, or delete through frozencopies.py"


def scored(*scores: float) -> list[SimpleNamespace]:
    """Ledger entries r.1, r.2, ... of run r, scored `scores` (what retention reads of them)."""
    return [
        SimpleNamespace(submission_id=f"r.{seq}", seq=seq, status="scored", score=score, marked_final=False)
        for seq, score in enumerate(scores, 1)
    ]


def copy(subs: Path, name: str) -> Path:
    d = subs / name
    d.mkdir(parents=True)
    (d / "config.json").write_text("{}")
    (d / "model.safetensors").write_bytes(b"x" * 100)
    return d


def test_a_copy_goes_with_its_scan_and_partial_and_twice_is_nothing(tmp_path):
    subs = tmp_path / "submissions"
    c = copy(subs, "r.0001")
    copy(subs, "r.0001.scan")
    copy(subs, "r.0001.partial")
    other = copy(subs, "r.0002")
    assert FC.remove_frozen(c, subs) == ["r.0001", "r.0001.scan", "r.0001.partial"]
    assert sorted(p.name for p in subs.iterdir()) == ["r.0002"] and (other / "model.safetensors").exists()
    assert FC.remove_frozen(c, subs) == []  # idempotent: a second deleter finds it gone
    for bad in (tmp_path / "r.0002", subs / ".." / "submissions2" / "x", tmp_path / "submissions" / ".."):
        with pytest.raises(FC.NotAFrozenCopy):
            FC.remove_frozen(bad, subs)


def test_a_crash_between_rename_and_removal_leaves_no_copy_that_looks_whole(tmp_path, monkeypatch):
    """The removal killed part-way (here: failing on the second file): no r.0001/ with a file missing is left for
    a grader to load, only trash, which the run's disk use counts and the next deletion removes."""
    sweep = SweepDir(tmp_path)
    c = copy(sweep.submissions, "r.0001")
    calls, real_rmtree = [], shutil.rmtree

    def dying_rmtree(path, *a, **k):
        p = Path(path)
        calls.append(p.name)
        (p / "config.json").unlink()  # half done, then the process dies
        raise KeyboardInterrupt

    monkeypatch.setattr(FC.shutil, "rmtree", dying_rmtree)
    with pytest.raises(KeyboardInterrupt):
        FC.remove_frozen(c, sweep.submissions)
    assert calls and not c.exists()
    assert frozen_copies(sweep, "r") == [] and run_disk_use(sweep, "r").frozen_copies == 0
    (trash,) = frozen_copies(sweep, "r", beside=True)
    assert FC.TRASH.fullmatch(trash.name) and run_disk_use(sweep, "r").frozen >= 100
    monkeypatch.setattr(FC.shutil, "rmtree", real_rmtree)
    assert FC.remove_frozen(c, sweep.submissions) == [] and not list(sweep.submissions.iterdir())


def test_a_planted_symlink_is_removed_never_followed(tmp_path):
    subs = tmp_path / "submissions"
    outside = copy(tmp_path, "precious")
    subs.mkdir()
    (subs / "r.0001").symlink_to(outside)
    inner = copy(subs, "r.0002")
    (inner / "link").symlink_to(outside)
    assert FC.remove_frozen(subs / "r.0001", subs) == ["r.0001"]
    assert FC.remove_frozen(inner, subs) == ["r.0002"]
    assert not list(subs.iterdir()) and sorted(p.name for p in outside.iterdir()) == [
        "config.json",
        "model.safetensors",
    ]


def test_racing_deleters_each_finish_and_one_deletes(tmp_path):
    subs = tmp_path / "submissions"
    for i in range(20):
        c = copy(subs, f"r.{i:04d}")
        copy(subs, f"r.{i:04d}.scan")
        got: list[list[str]] = []
        threads = [threading.Thread(target=lambda c=c, got=got: got.append(FC.remove_frozen(c, subs))) for _ in "abc"]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(n for names in got for n in names) == [c.name, f"{c.name}.scan"]
    assert not list(subs.iterdir())


def test_prune_deletes_through_the_helper(tmp_path, monkeypatch):
    """Retention's prune: each copy the final part can no longer pick goes with its scan; the pick stays whole."""
    sweep = SweepDir(tmp_path)
    for seq in (1, 2):
        copy(sweep.submissions, f"r.{seq}")
        copy(sweep.submissions, f"r.{seq}.scan")
    entries = scored(0.2, 0.9)
    monkeypatch.setattr(SweepDir, "ledger", SimpleNamespace(entries=lambda run_id: entries))
    seen = []
    monkeypatch.setattr(retention, "remove_frozen", lambda c, s: seen.append(c.name) or FC.remove_frozen(c, s))
    assert retention.prune(sweep, "r", "best-feedback") == ["r.1"] and seen == ["r.1"]
    assert sorted(p.name for p in sweep.submissions.iterdir()) == ["r.2", "r.2.scan"]


def test_the_record_stage_deletes_through_the_helper_and_a_bad_entry_never_stops_pruning(tmp_path):
    """Recording._delete: the scan and (not split) the copy of the recorded submission; under split the pruning,
    even where the queue entry names a path outside submissions/ (logged, nothing there touched)."""
    from a2rl.grading.record import Recording

    subs = tmp_path / "submissions"
    for name in ("r.1", "r.1.scan", "r.2", "r.2.scan", "q.1", "q.1.scan"):
        copy(subs, name)
    outside = copy(tmp_path, "r.9")
    entries = scored(0.2, 0.9)
    spec = SimpleNamespace(storage=SimpleNamespace(keep="candidates"), grader=SimpleNamespace(keep_artifacts=False))
    sweep = SimpleNamespace(submissions=subs, spec=spec, ledger=SimpleNamespace(entries=lambda run_id: entries))
    stage = SimpleNamespace(sweep=sweep, settings=SimpleNamespace(final="best-feedback"))
    feedback = SimpleNamespace(submission_id="r.2", run_id="r", part="feedback")
    Recording._delete(stage, feedback, str(outside))
    assert sorted(p.name for p in subs.iterdir()) == ["q.1", "q.1.scan", "r.2", "r.2.scan"] and outside.is_dir()
    Recording._delete(stage, SimpleNamespace(submission_id="q.1", run_id="q", part="all"), str(subs / "q.1"))
    assert sorted(p.name for p in subs.iterdir()) == ["r.2", "r.2.scan"]
