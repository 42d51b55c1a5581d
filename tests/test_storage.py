"""Bounded storage (issue 33 item 4): a run keeps in the sweep directory only the frozen submissions the final part
may still pick (grading/retention.py), within its storage budget (`storage:`, run/submit.py) that counts its code
blobs and run directory too (recording/diskuse.py); the capacity plan and `a2rl status` show it in GiB.

The grading runs on the real arith task, queue, ledger and grader with test_final_split.py's skilled stand-in."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest
from safetensors.torch import load_file, save_file

from a2rl.grading.retention import deletable, select_final
from a2rl.recording.diskuse import frozen_copies, run_disk_use
from a2rl.recording.snapshots import snapshot_code
from a2rl.run.api import GradingAPI
from a2rl.run.artifacts import KEEP_SUFFIXES
from a2rl.run.submit import OverStorageBudget
from a2rl.spec.sizing import storage_default_gb, workspace_default_gb
from a2rl.store.sweepdir import SweepDir
from a2rl.units import GIB
from conftest import a2rl, write_sweep
from test_final_split import Sweep, variant
from test_units import figures_without_unit

RULES = ["best-feedback", "last", "agent"]


@pytest.mark.parametrize("rule", RULES)
def test_retention_never_deletes_what_the_final_part_can_still_pick(rule):
    """Random runs (scores with ties, invalid submissions, marks; recorded out of order as racing graders do):
    after every recording only the current pick stays, and it is the one the final part picks at the end."""
    rng = random.Random(rule)
    for trial in range(300):
        n = rng.randint(1, 8)
        subs = [
            SimpleNamespace(
                submission_id=f"r.{seq}",
                seq=seq,
                status=rng.choice(["scored", "scored", "scored", "invalid"]),
                score=float(rng.randint(0, 3)),
                marked_final=rng.random() < 0.3,
            )
            for seq in range(1, n + 1)
        ]
        order = subs[:]
        if trial % 2:
            rng.shuffle(order)
        on_disk, recorded = {s.submission_id for s in subs}, []
        for sub in order:
            recorded.append(sub)
            on_disk -= deletable(recorded, rule)
            scored = [e for e in recorded if e.status == "scored"]
            assert len(on_disk & {e.submission_id for e in recorded}) <= 1  # bounded: one recorded copy at most
            if scored:
                assert select_final(scored, rule)[0].submission_id in on_disk
        final = [e for e in subs if e.status == "scored"]
        if final:
            assert select_final(final, rule)[0].submission_id in on_disk, (rule, subs, order)


def _entry(seq: int, score: float, marked: bool = False, status: str = "scored") -> SimpleNamespace:
    return SimpleNamespace(submission_id=f"r.{seq}", seq=seq, status=status, score=score, marked_final=marked)


def test_each_final_rule_picks_its_own_submission_and_says_which():
    """The property above holds for any consistent pick; this pins each rule's pick and the reason recorded."""
    runs = [_entry(1, 0.5), _entry(2, 0.9, marked=True), _entry(3, 0.9), _entry(4, 0.7, marked=True), _entry(5, 0.1)]
    picks = {rule: (e.seq, why) for rule in RULES for e, why in [select_final(runs, rule)]}
    # the best's tie goes to the earliest; the agent's latest mark, not its best; the last whatever its score
    assert picks == {"best-feedback": (2, "best-feedback"), "last": (5, "last"), "agent": (4, "agent")}
    unmarked = [_entry(1, 0.2), _entry(2, 0.8), _entry(3, 0.8), _entry(4, 0.3)]
    assert (lambda e, why: (e.seq, why))(*select_final(unmarked, "agent")) == (2, "agent: none marked, best-feedback")
    # what is deletable follows the rule: all but its pick, invalid ones included
    entries = [*runs, _entry(6, 0.0, status="invalid")]
    assert deletable(entries, "last") == {f"r.{i}" for i in (1, 2, 3, 4, 6)}
    assert deletable(entries, "agent") == {f"r.{i}" for i in (1, 2, 3, 5, 6)}
    assert deletable([_entry(1, 0.0, status="invalid")], "best-feedback") == {"r.1"}


def test_prune_deletes_the_recorded_copies_its_rule_can_no_longer_pick(tmp_path, monkeypatch, caplog):
    """Only this run's recorded copies go (a freeze under way, a copy not yet recorded and other runs' stay), and a
    copy another grader deleted meanwhile is no error (racing graders prune the same run)."""
    from a2rl.grading import retention

    subs = tmp_path / "submissions"
    for name in ["r.1", "r.2", "r.3", "r.4", "r.5", "r.6.partial", "r.7", "other.1"]:
        (subs / name).mkdir(parents=True)
        (subs / name / "model.safetensors").write_bytes(b"x")
    entries = [_entry(1, 0.5), _entry(2, 0.9), _entry(3, 0.1, marked=True), _entry(4, 0.2), _entry(5, 0.3)]
    sweep = SimpleNamespace(submissions=subs, ledger=SimpleNamespace(entries=lambda run_id: entries))
    listed = retention.frozen_copies

    def racing(sweep, run_id):  # another grader deleted r.4 after this one listed it
        paths = listed(sweep, run_id)
        shutil.rmtree(subs / "r.4")
        return paths

    monkeypatch.setattr(retention, "frozen_copies", racing)
    with caplog.at_level("INFO", logger="a2rl.grader"):
        deleted = retention.prune(sweep, "r", "agent")
    assert sorted(deleted) == ["r.1", "r.2", "r.5"]  # r.4 was the other grader's to delete
    assert sorted(p.name for p in subs.iterdir()) == ["other.1", "r.3", "r.6.partial", "r.7"]
    assert caplog.messages == [f"r: deleted frozen copies {deleted} (grader.final agent can no longer pick them)"]
    caplog.clear()
    monkeypatch.setattr(retention, "frozen_copies", listed)
    assert retention.prune(sweep, "r", "agent") == [] and caplog.messages == []  # nothing left to delete: silent


def _on_disk(s: Sweep, entries) -> list[bool]:
    return [(s.sweep.submissions / e.submission_id).is_dir() for e in entries]


@pytest.mark.parametrize(  # each rule on random runs above; the wiring once in the fast layer, all in the slow
    "rule", ["best-feedback", *(pytest.param(r, marks=pytest.mark.slow) for r in ("last", "agent"))]
)
def test_a_split_run_keeps_only_the_copy_its_final_rule_can_pick(rule, tmp_path, tiny_model, monkeypatch):
    s = Sweep(tmp_path, tiny_model, monkeypatch, final=rule)
    (run_id,) = s.submitters
    out = s.submitters[run_id].ws.output
    # a good one, a mediocre one marked, a poor one: the three rules pick three different submissions
    plan = [(0.9, False), (0.5, True), (0.1, False)]
    entries = []
    for i, (skill, mark) in enumerate(plan):
        entries.append(s.submit(run_id, variant(tiny_model, out / f"m{i}", salt=i + 1, skill=skill), final=mark))
        assert entries[-1].status == "scored", entries[-1].error
        pick = select_final([e for e in entries if e.status == "scored"], rule)[0]
        assert _on_disk(s, entries) == [e.submission_id == pick.submission_id for e in entries], (rule, i)
    expected = {"best-feedback": 0, "agent": 1, "last": 2}[rule]
    assert _on_disk(s, entries) == [i == expected for i in range(3)]
    use = run_disk_use(s.sweep, run_id)
    assert use.frozen_copies == 1 and use.frozen > 0
    # the deleted copies' hash, lineage and scores stay in the ledger
    assert all(e.weights_hash and e.lineage is not None and e.score is not None for e in entries)
    s.end(run_id)
    for orphan in (f"{run_id}.0009", f"{run_id}.0010.partial"):  # a job killed mid-submission left them
        (s.sweep.submissions / orphan).mkdir()
        (s.sweep.submissions / orphan / "model.safetensors").write_bytes(b"x" * 4096)
    final = s.grader.score_final(run_id)
    assert (final.status, final.submission_id) == ("scored", entries[expected].submission_id)
    assert run_disk_use(s.sweep, run_id).frozen == 0  # all gone once the final part is scored, orphans too
    assert not frozen_copies(s.sweep, run_id, beside=True)


def _allocated(root: Path) -> int:
    return sum(os.lstat(p).st_blocks * 512 for p in root.rglob("*"))


def test_disk_use_counts_the_runs_copies_run_directory_and_distinct_blobs(tmp_path, monkeypatch):
    from a2rl.recording import diskuse
    from a2rl.recording.snapshots import CodeSnapshot, SnapshotFile

    sweep = SweepDir(tmp_path)
    assert run_disk_use(sweep, "r") == diskuse.DiskUse(0, 0, 0, 0)  # no submissions/ nor run directory yet
    for name in ["r.1", "r.12", "r.2.partial", "rx.1", "xr.1", "r.a", "r.1.scan", "r.2.partial.x"]:
        (sweep.submissions / name / "sub").mkdir(parents=True)
        (sweep.submissions / name / "sub" / "w.bin").write_bytes(b"x" * 5000)
    (sweep.submissions / "r.1" / "usr").symlink_to("/usr")  # a link: its own blocks, never followed
    assert sorted(p.name for p in diskuse.frozen_copies(sweep, "r")) == ["r.1", "r.12"]
    copies = diskuse.frozen_copies(sweep, "r", beside=True)  # what the run's disk use counts
    assert sorted(p.name for p in copies) == ["r.1", "r.1.scan", "r.12", "r.2.partial"]
    assert diskuse.tree_bytes(sweep.submissions / "r.1") == _allocated(sweep.submissions / "r.1") >= 5000
    snaps = sweep.run_dir("r") / "snapshots"
    snaps.mkdir(parents=True)
    files = [SnapshotFile(path="a.py", sha256="a" * 64, size=300), SnapshotFile(path="b.py", sha256="b" * 64, size=50)]
    for seq, kept in ((1, files), (2, [files[0], SnapshotFile(path="c.py", sha256="a" * 64, size=300)])):
        CodeSnapshot(
            run_id="r", submission_id=f"r.{seq}", seq=seq, taken_at=0.0, files=kept, skipped=[], total_bytes=0,
            previous_seq=None, added=[], modified=[], removed=[],
        ).dump(snaps / f"{seq:03d}.json")  # fmt: skip
    use = run_disk_use(sweep, "r")
    frozen = sum(_allocated(p) for p in copies)  # a .partial (a freeze under way) and a .scan, not counted copies
    assert use == diskuse.DiskUse(frozen=frozen, frozen_copies=2, run_dir=_allocated(sweep.run_dir("r")), blobs=350)
    (snaps / "003.json").write_text("{damaged")  # `a2rl status` and the submitter still see the bytes on disk
    assert run_disk_use(sweep, "r").blobs == 0
    assert diskuse.DiskUse(frozen=GIB, frozen_copies=2, run_dir=GIB // 4, blobs=GIB // 2).describe() == (
        "1.75 GiB (2 frozen submission(s) 1.00 GiB, code blobs 0.50 GiB, run directory 0.25 GiB)"
    )


def test_tree_bytes_skips_what_vanishes_while_it_walks_and_counts_the_rest(tmp_path, monkeypatch):
    from a2rl.recording.diskuse import tree_bytes

    for d in "abc":
        (tmp_path / d / "in").mkdir(parents=True)
        (tmp_path / d / "in" / "f").write_bytes(b"y" * 9000)
        (tmp_path / d / "g").write_bytes(b"z" * 9000)
    whole = _allocated(tmp_path)
    assert tree_bytes(tmp_path) == whole and tree_bytes(tmp_path / "gone") == 0
    scandir, failed = os.scandir, []

    def gone(path: str) -> int:  # what is not counted of a path that vanished: itself and all under it
        return os.lstat(path).st_blocks * 512 + (_allocated(Path(path)) if Path(path).is_dir() else 0)

    def vanished_dir(path):  # the first subdirectory read is gone by then: its own entry counted, not its files
        if path != str(tmp_path) and not failed:
            failed.append(path)
            raise FileNotFoundError(path)
        return scandir(path)

    monkeypatch.setattr(os, "scandir", vanished_dir)
    assert tree_bytes(tmp_path) == whole - _allocated(Path(failed[0]))

    class Listing:  # the first entry listed below the top's is gone by the time it is stat()ed
        def __init__(self, path):
            self.it = scandir(path)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return self.it.__exit__(*exc)

        def __iter__(self):
            for e in self.it:
                if failed or Path(e.path).parent == tmp_path:
                    yield e
                else:
                    failed.append(e.path)
                    yield SimpleNamespace(stat=lambda **_: os.stat(tmp_path / "gone"))

    failed.clear()
    monkeypatch.setattr(os, "scandir", Listing)
    assert tree_bytes(tmp_path) == whole - gone(failed[0])


def _half(src: Path, dest: Path) -> Path:
    """`src` saved in fp16: half the bytes of its weights."""
    dest.mkdir(parents=True)
    for f in src.iterdir():
        if f.suffix == ".safetensors":
            save_file({k: v.half() for k, v in load_file(f).items()}, dest / f.name, metadata={"format": "pt"})
        else:
            (dest / f.name).write_bytes(f.read_bytes())
    return dest


def _kept_bytes(model: Path) -> int:
    return sum(f.stat().st_size for f in model.iterdir() if f.suffix in KEEP_SUFFIXES)  # what freeze() copies


def test_a_run_at_its_storage_budget_gets_a_json_error_and_smaller_submissions_still_grade(
    tmp_path, tiny_model, monkeypatch
):
    size = _kept_bytes(variant(tiny_model, tmp_path / "probe", salt=99))
    # room for one fp32 copy and 60% of another, and 128 KiB for the run's code blobs and records
    budget_gb = (1.6 * size + (128 << 10)) / GIB
    (tmp_path / "s").mkdir()
    s = Sweep(tmp_path / "s", tiny_model, monkeypatch, storage={"run_gb": budget_gb})
    (run_id,) = s.submitters
    submitter = s.submitters[run_id]
    out = submitter.ws.output
    assert submitter.storage_bytes == int(budget_gb * GIB)
    first = s.submit(run_id, variant(tiny_model, out / "m0", salt=1, skill=0.9))
    assert first.status == "scored"  # the best: kept for the final part
    second = variant(tiny_model, out / "m1", salt=2, skill=0.2)
    with pytest.raises(OverStorageBudget) as e:
        submitter.submit(str(second), wait=False)
    used = run_disk_use(s.sweep, run_id).total
    assert (e.value.used, e.value.needed, e.value.allowed) == (used, _kept_bytes(second), submitter.storage_bytes)
    assert s.sweep.queue.count(run_id) == 1  # nothing enqueued

    # over HTTP: 507 with the bytes; `a2rl submit` prints the JSON and the error
    with GradingAPI(submitter, submitter.budget) as api:
        req = urllib.request.Request(
            f"{api.url}/submit",
            data=json.dumps({"model_path": str(second)}).encode(),
            headers={"Authorization": f"Bearer {api.token}"},
            method="POST",
        )
        with pytest.raises(urllib.error.HTTPError) as http:
            urllib.request.urlopen(req)
        body = json.loads(http.value.read())
        env = {**os.environ, "GRADING_SERVER_URL": api.url, "GRADING_TOKEN": api.token}
        proc = subprocess.run(
            [sys.executable, "-m", "a2rl", "submit", str(second)], env=env, capture_output=True, text=True, timeout=120
        )
    assert http.value.code == 507
    needed = e.value.needed
    assert (body["bytes_used"], body["bytes_needed"], body["bytes_allowed"]) == (used, needed, submitter.storage_bytes)
    assert "storage budget" in body["error"] and "smaller model" in body["error"]
    assert proc.returncode == 1 and "(HTTP 507)" in proc.stderr and json.loads(proc.stdout)["bytes_needed"] == needed
    assert s.sweep.queue.count(run_id) == 1

    # half the bytes: fits beside the kept candidate, is graded, and (worse) is deleted after grading
    small = s.submit(run_id, _half(second, out / "m1-half"))
    assert small.status == "scored", small.error
    assert _on_disk(s, [first, small]) == [True, False]
    assert run_disk_use(s.sweep, run_id).total <= submitter.storage_bytes
    better = s.submit(run_id, _half(variant(tiny_model, out / "m2", salt=3, skill=1.0), out / "m2-half"))
    assert better.status == "scored" and better.score > first.score
    assert _on_disk(s, [first, small, better]) == [False, False, True]  # the new best replaced the old one


def test_code_blobs_count_toward_the_budget_and_stop_at_it(tmp_path, tiny_model, monkeypatch):
    s = Sweep(tmp_path, tiny_model, monkeypatch)
    (run_id,) = s.submitters
    code = s.submitters[run_id].ws.code
    before = run_disk_use(s.sweep, run_id)
    (code / "big.txt").write_text("x" * (300 << 10))  # 300 KiB of new content, under recording's per-file cap
    (code / "more.txt").write_text("y" * (300 << 10))
    snap = snapshot_code(
        s.sweep.root,
        run_id,
        code,
        submission_id=f"{run_id}.1",
        seq=1,
        settings=s.sweep.spec.recording,
        room_bytes=400 << 10,
    )
    kept = {f.path for f in snap.files}
    skipped = {f.path: f.reason for f in snap.skipped}
    assert "big.txt" in kept and skipped.get("more.txt") == "over storage.run_gb"  # past the room left
    after = run_disk_use(s.sweep, run_id)
    assert after.blobs - before.blobs == sum(f.size for f in snap.files) >= 300 << 10
    assert after.total > before.total + (300 << 10)
    # the submitter gives the snapshot what its budget leaves: a run at its budget stores no new code
    submitter = s.submitters[run_id]
    submitter.storage_bytes = after.total
    assert submitter.storage_room() == 0
    (code / "new.txt").write_text("z" * 1000)
    assert submitter.snapshot(f"{run_id}.2", 2) is None
    snap2 = json.loads((s.sweep.run_dir(run_id) / "snapshots" / "002.json").read_text())
    assert {f["path"]: f["reason"] for f in snap2["skipped"]}.get("new.txt") == "over storage.run_gb"


def test_the_capacity_plan_and_status_show_storage_in_gib(tmp_path, tiny_model, monkeypatch):
    from a2rl.scheduling import capacity
    from a2rl.scheduling.base import make_scheduler

    s = Sweep(tmp_path, tiny_model, monkeypatch)
    (run_id,) = s.submitters
    spec, runs = s.sweep.spec, s.sweep.runs()
    params = {"tiny-llama": 7_615_616_512}  # as if Qwen2.5-7B
    line = capacity.plan(spec, runs, params, make_scheduler("local", spec), 30)[-1]
    per_run = storage_default_gb(7_615_616_512)
    assert per_run == pytest.approx(7_615_616_512 * 6 / GIB + 1)
    expected = 2 * 7_615_616_512 * 2 / GIB + spec.recording.max_run_mb / 1024
    assert line.startswith(f"storage: per run at most {per_run:.1f} GiB (storage.run_gb, default"), line
    assert f"expected up to {expected:.1f} GiB (2 frozen bf16 copies of 30 submissions at once" in line
    assert f"per sweep of 1 runs at most {per_run:.1f} GiB, expected {expected:.1f} GiB" in line
    assert f"workspaces up to {workspace_default_gb(7_615_616_512):.1f} GiB each" in line
    assert not figures_without_unit(line), line  # every figure says GiB (a2rl/units.py)
    keep_all = spec.model_copy(update={"storage": spec.storage.model_copy(update={"keep": "all", "run_gb": 500})})
    line = capacity.plan(keep_all, runs, params, make_scheduler("local", keep_all), 30)[-1]
    assert "per run at most 500.0 GiB (storage.run_gb)" in line and "30 frozen bf16 copies" in line

    s.submit(run_id, variant(tiny_model, s.submitters[run_id].ws.output / "m0", salt=1))
    use = run_disk_use(s.sweep, run_id)
    proc = a2rl("status", str(s.sweep.root))
    assert proc.returncode == 0, proc.stderr
    (row,) = [line for line in proc.stdout.splitlines() if line.startswith(run_id)]
    assert f"{use.total / GIB:.2f} (1 frozen)" in row
    assert f"disk: {use.total / GIB:.2f} GiB kept by the runs" in proc.stdout
    assert f"storage.run_gb per run: tiny-llama {storage_default_gb(spec_params(s)):.2f} GiB" in proc.stdout


def spec_params(s: Sweep) -> int:
    from a2rl.weights import parameter_count

    return parameter_count(s.submitters[next(iter(s.submitters))].ws.model)


@pytest.mark.slow  # two real `a2rl validate` calls
def test_the_defaults_follow_the_model_and_validate_refuses_a_budget_too_small(tmp_path, tiny_model):
    from a2rl.spec.sizing import run_storage_gb, workspace_gb
    from a2rl.spec.sweep import SweepSpec

    spec = SweepSpec(name="s", tasks=["arith"], agents=["baseline"], models=["builtin:tiny-llama"], budget=60)
    qwen7b = 7_615_616_512
    assert workspace_gb(spec, qwen7b) == pytest.approx(qwen7b * 16 / GIB + 16) != 256  # no longer a fixed 256 GiB
    assert workspace_gb(spec, 500_000) == pytest.approx(16, abs=0.01)
    assert run_storage_gb(spec, qwen7b) == pytest.approx(43.56, abs=0.01)  # a 7B run: bf16 candidate + fp32 beside
    set_ = SweepSpec(**{**spec.model_dump(), "limits": {"workspace_gb": 50}, "storage": {"run_gb": 30}})
    assert (workspace_gb(set_, qwen7b), run_storage_gb(set_, qwen7b)) == (50, 30)

    models = [{"name": "tiny-llama", "path": str(tiny_model)}]
    path = write_sweep(tmp_path, models=models, storage={"run_gb": 0.001})  # 1 MiB: not two bf16 copies of it
    proc = a2rl("validate", str(path), "--elsewhere")
    assert proc.returncode == 2
    assert "error: storage.run_gb: 0.001 GiB holds fewer than two bf16 copies of model 'tiny-llama'" in proc.stderr
    assert "storage: per run at most 0.0 GiB (storage.run_gb)" in proc.stdout
    ok = write_sweep(tmp_path, name="ok", models=models, storage={"run_gb": 0.01, "keep": "all"})
    proc = a2rl("validate", str(ok), "--elsewhere")
    assert proc.returncode == 0, proc.stderr
    assert "(10 frozen bf16 copies of 10 submissions at once: every frozen copy (storage.keep: all)" in proc.stdout
