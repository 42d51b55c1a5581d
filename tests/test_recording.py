"""Runtime recording and the per-run report: code snapshots at each submission (deduplicated blobs, manifests,
diffs) and process metrics whose values follow from what the run did."""

from __future__ import annotations

import json

import pytest

from a2rl.recording.archive import WorkspaceArchive
from a2rl.recording.snapshots import blob_path, load_snapshots, snapshot_dir
from a2rl.recording.transcripts import parse_usage
from a2rl.reporting.metrics import RunMetrics, SubmissionRow
from a2rl.reporting.runreport import write_run_report
from test_runs import launch, only_result


@pytest.mark.slow  # a whole sweep
def test_three_submissions_have_snapshots_diffs_and_metrics(tmp_path):
    sweep = launch(
        tmp_path,
        agents=[{"name": "submitter", "args": {"count": 3, "edit_code": True}}],
        recording={"max_file_mb": 0.5},
    )
    result = only_result(sweep)
    assert result.scores == [10.0, 20.0, 30.0], result.failure_reason
    assert result.cpu_seconds is not None and result.cpu_seconds > 0
    assert result.agent_started_at <= result.agent_ended_at and result.usage is None  # no transcript parser

    snaps = load_snapshots(sweep.root, result.run_id)
    assert [s.seq for s in snaps] == [1, 2, 3]
    assert (snaps[0].added, snaps[1].modified, snaps[2].modified) == (["train.py"], ["train.py"], ["train.py"])
    assert snaps[0].previous_seq is None and snaps[2].previous_seq == 2
    for s in snaps:  # every file's content is in the shared blob store
        assert all(blob_path(sweep.root, f.sha256).exists() for f in s.files)
    diff = (snapshot_dir(sweep.root, result.run_id) / "002.diff").read_text()
    assert "+STAGE_1 = 1" in diff and "--- a/train.py" in diff
    assert "+from trl import SFTTrainer" in (snapshot_dir(sweep.root, result.run_id) / "001.diff").read_text()

    report = sweep.run_dir(result.run_id) / "report"
    m = RunMetrics.load(report / "metrics.json")
    assert m.valid_submission_rate == 1.0 and m.first_valid_idx == 0 and m.monotonic_ratio == 1.0
    assert m.score_trajectory == [10.0, 20.0, 30.0] and m.copy_model_count == 0
    assert m.train_type == "SFT" and m.train_types_seen == ["SFT"]
    assert (m.failure_type, m.failure_source) == (None, None)
    assert 0 <= m.time_to_first_improvement <= m.time_to_best and m.last_submit_gap >= 0
    assert 0 < m.time_used_ratio < 1 and m.code_snapshots == 3
    rows = [json.loads(line) for line in (report / "summary.jsonl").read_text().splitlines()]
    assert [(r["iteration"], r["score"], r["delta_prev"]) for r in rows] == [
        (1, 10.0, None),
        (2, 20.0, 10.0),
        (3, 30.0, 10.0),
    ]
    assert all(r["schema_version"] == SubmissionRow.SCHEMA and r["train_type"] == "SFT" for r in rows)
    md = (report / "summary.md").read_text()
    assert md.count("## Submission") == 3 and "~train.py" in md
    assert (report / "trajectory.png").read_bytes()[:4] == b"\x89PNG"
    # what the agent left stays browsable in the sweep directory (its scratch workspace may be node-local)
    kept = sweep.run_dir(result.run_id) / "workspace"
    assert (kept / "code" / "train.py").read_text() == (
        sweep.workspace(result.run_id) / "code" / "train.py"
    ).read_text()
    assert (kept / "output" / "answers.jsonl").is_file() and (kept / "output" / "v2" / "config.json").is_file()
    assert not list(kept.rglob("*.safetensors")) and not (kept / "data").exists() and not (kept / "models").exists()
    manifest = WorkspaceArchive.load(kept / "manifest.json")
    assert "code/train.py" in {f.path for f in manifest.files} and manifest.source == str(
        sweep.workspace(result.run_id)
    )
    # the report is rebuilt from the sweep directory alone
    (report / "metrics.json").unlink()
    write_run_report(sweep, result.run_id)
    assert RunMetrics.load(report / "metrics.json") == m


def test_snapshots_skip_large_files_and_dedupe(tmp_path):
    from a2rl.recording.snapshots import snapshot_code
    from a2rl.spec.sweep import RecordingSettings

    code = tmp_path / "code"
    (code / "__pycache__").mkdir(parents=True)
    (code / "a.py").write_text("x = 1\n")
    (code / "big.bin.txt").write_bytes(b"0" * 3000)
    (code / "__pycache__" / "a.pyc").write_bytes(b"junk")
    (code / "link").symlink_to("/etc/hostname")
    settings = RecordingSettings(max_file_mb=2000 / 2**20, max_total_mb=1)
    for seq in (1, 2):
        s = snapshot_code(tmp_path / "sd", "r", code, submission_id=f"r.{seq}", seq=seq, settings=settings)
        assert [f.path for f in s.files] == ["a.py"]
        assert {(k.path, k.reason) for k in s.skipped} == {("big.bin.txt", "over max_file_mb"), ("link", "symlink")}
    assert (
        s.added == s.modified == s.removed == [] and (snapshot_dir(tmp_path / "sd", "r") / "002.diff").read_text() == ""
    )
    assert len(list((tmp_path / "sd" / "blobs").rglob("*"))) == 2  # one prefix folder, one blob


def test_transcript_parsers_ignore_noise():
    log = "\n".join(
        [
            "[a2rl 10:00:00] attempt 1: claude -p ...",
            '{"type":"assistant","message":{}}',
            "Traceback { not json",
            '{"type":"result","usage":{"input_tokens":10,"cache_read_input_tokens":5,"output_tokens":7},'
            '"total_cost_usd":0.25}',
            '{"type":"result","usage":{"input_tokens":1,"output_tokens":1},"total_cost_usd":0.5}',
        ]
    )
    u = parse_usage("claude", log)
    assert (u.calls, u.input_tokens, u.cached_input_tokens, u.output_tokens, u.cost_usd) == (2, 16, 5, 8, 0.75)
    pretty = (
        'noise\n{\n  "response": "ok",\n  "stats": {"models": {"g": {"tokens": {"prompt": 3, "candidates": 4}}}}\n}\n'
    )
    g = parse_usage("gemini", pretty)
    assert (g.input_tokens, g.output_tokens, g.cost_usd) == (3, 4, None)
    assert parse_usage("none", log) is None and parse_usage("codex", "nothing").calls == 0


def test_workspace_archive_keeps_within_its_caps(tmp_path):
    from a2rl.recording.archive import archive_workspace
    from a2rl.spec.sweep import RecordingSettings

    ws = tmp_path / "ws"
    for d in ("code", "output/m", "data", "home/.cache", "models"):
        (ws / d).mkdir(parents=True)
    (ws / "code" / "train.py").write_text("print('hi')\n")
    (ws / "code" / "notes.md").write_bytes(b"n" * 1500)
    (ws / "output" / "m" / "model.safetensors").write_bytes(b"w" * 100)
    (ws / "output" / "m" / "config.json").write_text("{}")
    (ws / "output" / "log.txt").write_bytes(b"l" * 3000)
    (ws / "data" / "train.jsonl").write_text("{}\n")
    (ws / "home" / ".cache" / "x").write_text("x")
    (ws / "run_meta.json").write_text("{}")
    settings = RecordingSettings(workspace_max_file_mb=2000 / 2**20, workspace_max_mb=2500 / 2**20)
    dest = tmp_path / "sd" / "workspace"
    archive = archive_workspace(ws, dest, "r", settings)
    assert [f.path for f in archive.files] == [
        "run_meta.json",
        "code/notes.md",
        "code/train.py",
        "output/m/config.json",
    ]
    assert {(k.path, k.reason) for k in archive.skipped} == {("output/log.txt", "over workspace_max_file_mb")}
    assert sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file()) == [
        "code/notes.md",
        "code/train.py",
        "manifest.json",
        "output/m/config.json",
        "run_meta.json",
    ]
    (ws / "code" / "more.py").write_bytes(b"m" * 1000)  # a resumed run's archive replaces the old one, caps hold
    archive = archive_workspace(ws, dest, "r", settings)
    assert ("code/notes.md", "over workspace_max_mb") in {(k.path, k.reason) for k in archive.skipped}
    assert (
        archive.total_bytes <= 2500
        and (dest / "code" / "more.py").exists()
        and not (dest / "code" / "notes.md").exists()
    )
