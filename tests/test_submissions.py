"""What an agent may submit: every bad input gets its own clear error and is recorded as an invalid submission
(not a crash); copies of the base model are recognised; the API refuses submissions after the budget."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from a2rl.grading.daemon import GradingDaemon
from a2rl.run.api import GradingAPI
from a2rl.run.budget import Budget, BudgetExhausted
from a2rl.run.submit import RunSubmitter
from a2rl.run.workspace import create_workspace
from a2rl.scheduling.launcher import open_sweep
from a2rl.spec.tasks import get_task
from a2rl.tasklib.prepare import ensure_prepared
from conftest import FIXTURES, REPO, write_sweep

sys.path.insert(0, str(FIXTURES / "agents"))
from variants import make_variant  # noqa: E402


@pytest.fixture
def run(tmp_path, tiny_model):
    """A run's sweep, workspace and submitter, with a grader we drive by hand."""
    sweep, (spec,) = open_sweep(write_sweep(tmp_path), tmp_path / "sd")
    task = get_task("echo", [FIXTURES / "tasks"])
    data = ensure_prepared(task, sweep.data_root())
    ws = create_workspace(
        sweep.workspace(spec.run_id), task=task, data=data, model_dir=tiny_model, budget_s=60, source_tree=REPO
    )
    submitter = RunSubmitter(sweep, spec, ws, Budget(60))
    grader = GradingDaemon(sweep)

    def submit(path: str) -> dict:
        queued = submitter.submit(path, wait=False)
        while (claim := sweep.queue.claim(grader.holder, 60, sweep.ledger.has)) is not None:
            grader.grade(claim)
        return submitter.response(sweep.ledger.get(queued["submission_id"]))

    return sweep, ws, submitter, submit


def model_dir(ws, name: str, tiny_model: Path, **files: bytes) -> Path:
    d = ws.output / name
    d.mkdir()
    for fname, content in files.items():
        (d / fname.replace("__", ".")).write_bytes(content)
    return d


CASES = {
    "outside": (lambda ws, m: "/tmp", "outside the run's output directory"),
    "dotdot": (lambda ws, m: "output/../data", "outside the run's output directory"),
    "symlinked dir": (
        lambda ws, m: (ws.output / "esc").symlink_to(ws.model) or "output/esc",
        "outside the run's output directory",
    ),
    "symlinked file": (lambda ws, m: _with_symlinked_weights(ws, m), "is a symlink to"),
    "missing": (lambda ws, m: "output/nope", "does not exist"),
    "empty": (lambda ws, m: (ws.output / "empty").mkdir() or "output/empty", "is empty"),
    "not a dir": (lambda ws, m: (ws.output / "f").write_text("x") and "output/f", "is not a directory"),
    "lora": (
        lambda ws, m: str(model_dir(ws, "lora", m, adapter_config__json=b"{}", adapter_model__safetensors=b"x")),
        "LoRA/PEFT adapter",
    ),
    "pickle": (
        lambda ws, m: str(model_dir(ws, "pkl", m, config__json=b"{}", pytorch_model__bin=b"x")),
        "only pickle checkpoints",
    ),
    "no weights": (lambda ws, m: str(model_dir(ws, "cfg", m, config__json=b"{}")), "no *.safetensors weights"),
    "remote code": (lambda ws, m: _with_config(ws, m, auto_map={"AutoModel": "x.Y"}), "trust_remote_code"),
    "corrupt": (lambda ws, m: _corrupt(ws, m), "unreadable safetensors header"),
    "no model_path": (lambda ws, m: None, "model_path is required"),
}


def _with_symlinked_weights(ws, m: Path) -> str:
    d = ws.output / "linked"
    shutil.copytree(m, d)
    (d / "model.safetensors").unlink()
    (d / "model.safetensors").symlink_to(m / "model.safetensors")
    return str(d)


def _with_config(ws, m: Path, **extra) -> str:
    d = make_variant(m, ws.output / "custom", score=1, salt=7)
    config = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**config, **extra}))
    return str(d)


def _corrupt(ws, m: Path) -> str:
    d = ws.output / "corrupt"
    shutil.copytree(m, d)
    (d / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}      ")
    return str(d)


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_submissions_are_recorded_invalid_with_a_clear_error(run, tiny_model, case):
    sweep, ws, _, submit = run
    make, expected = CASES[case]
    answer = submit(make(ws, tiny_model))
    assert expected in answer["error"], answer
    assert answer["score"] is None and answer["total_submissions"] == 1
    (entry,) = sweep.ledger.entries(answer["submission_id"].rsplit(".", 1)[0])
    assert entry.status == "invalid" and expected in entry.error


def test_a_copy_of_the_base_model_scores_the_baseline(run, tiny_model):
    sweep, ws, _, submit = run
    copy = ws.output / "copy"
    shutil.copytree(tiny_model, copy)
    (copy / "tokenizer_config.json").write_text((copy / "tokenizer_config.json").read_text() + " ")
    answer = submit("output/copy")
    assert answer["note"].startswith("identical to the base model")
    assert answer["score"] == answer["baseline_score"] == 0.0 and answer["improvement"] == 0.0


def test_weights_are_frozen_at_submission(run, tiny_model):
    """Changing (or deleting) the directory after submitting changes nothing; pickle files never travel."""
    sweep, ws, submitter, _ = run
    d = make_variant(tiny_model, ws.output / "v", score=40, salt=3)
    (d / "pytorch_model.bin").write_bytes(b"pickle")
    queued = submitter.submit(str(d), wait=False)
    artifact = Path(sweep.queue.entry(queued["submission_id"]).artifact)
    assert artifact.parent == sweep.submissions and not (artifact / "pytorch_model.bin").exists()
    shutil.rmtree(d)
    make_variant(tiny_model, d, score=90, salt=4)
    grader = GradingDaemon(sweep)
    grader.grade(sweep.queue.claim(grader.holder, 60, sweep.ledger.has))
    assert sweep.ledger.get(queued["submission_id"]).score == 40.0
    assert not artifact.exists()  # dropped after grading unless grader.keep_artifacts


def test_the_runs_own_waits_pause_the_budget_and_it_ends_on_time(fake_clock):
    b = Budget(0.3, clock=fake_clock)
    b.pause()
    fake_clock.sleep(0.4)
    assert not b.expired()  # the run's own waits (a local driver, its final scores) are not the agent's time
    b.pause()  # nested
    b.resume()
    fake_clock.sleep(0.1)
    b.resume()
    assert b.used() == 0.0
    fake_clock.sleep(0.35)
    assert b.expired() and b.remaining() == 0.0


def test_http_api_and_cli(run, tiny_model):
    sweep, ws, submitter, _ = run
    submitter.budget = budget = Budget(1.0)
    with GradingAPI(submitter, budget) as api:
        health = json.loads(urllib.request.urlopen(f"{api.url}/health?token={api.token}").read())
        assert health == {"status": "ok", "run_id": submitter.run.run_id, "task": "echo"}
        auth = {"Authorization": f"Bearer {api.token}"}
        assert (
            json.loads(urllib.request.urlopen(urllib.request.Request(f"{api.url}/time", headers=auth)).read())[
                "budget_s"
            ]
            == 1.0
        )
        wrong = api.url.rsplit("/", 1)[0] + "/guess/health"
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(urllib.request.Request(wrong, headers=auth))
        assert e.value.code == 404
        env = {**os.environ, "GRADING_SERVER_URL": api.url, "GRADING_TOKEN": api.token}
        time.sleep(1.1)
        assert budget.expired()
        late = subprocess.run(
            [sys.executable, "-m", "a2rl", "submit", "output/x"], env=env, capture_output=True, text=True, timeout=60
        )
        assert late.returncode == 1
        assert "budget of 1 s is used up; submissions are refused" in json.loads(late.stdout)["error"]
        with pytest.raises(BudgetExhausted):
            submitter.submit("output/x")


def test_a_judge_outage_is_retried_not_recorded_invalid(run, tiny_model, monkeypatch):
    from a2rl.llm.judge import JudgeError

    sweep, ws, submitter, _ = run
    queued = submitter.submit(str(make_variant(tiny_model, ws.output / "v", score=40, salt=5)), wait=False)
    sid = queued["submission_id"]
    grader = GradingDaemon(sweep)
    grader.baseline("echo", "tiny-llama", "paper")
    monkeypatch.setattr("a2rl.grading.grader.INFRA_RETRY_S", 0)
    real, calls = grader.evaluate, []

    def judge_down_once(*args):
        calls.append(args)
        if len(calls) == 1:
            raise JudgeError("https://judge.example answered 503")
        return real(*args)

    grader.evaluate = judge_down_once
    assert grader.grade(sweep.queue.claim(grader.holder, 60, sweep.ledger.has)) is None
    assert not sweep.ledger.has(sid)
    again = sweep.queue.claim(grader.holder, 60, sweep.ledger.has)
    assert again.entry.submission_id == sid and again.lease.attempt == 1  # the outage used no attempt
    assert grader.grade(again).score == 40.0


def test_a_code_record_that_cannot_be_taken_is_itself_recorded(run, tiny_model, tmp_path):
    """code/ swapped for a symlink out of the workspace: the snapshot refuses to follow it, and the submission's
    queue entry, ledger entry and run report say that its code record is missing and why; it is graded as usual."""
    from a2rl.recording.snapshots import load_snapshots
    from a2rl.records import now
    from a2rl.reporting.runreport import write_run_report
    from a2rl.store.results import write_result

    sweep, ws, _, submit = run
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "heldout.py").write_text("HELD-OUT\n")
    shutil.rmtree(ws.code)
    ws.code.symlink_to(outside, target_is_directory=True)
    answer = submit(str(make_variant(tiny_model, ws.output / "v", score=40, salt=3)))
    assert answer["score"] == 40.0
    run_id = answer["submission_id"].rsplit(".", 1)[0]
    why = sweep.queue.entry(answer["submission_id"]).snapshot_error
    assert why.startswith("code snapshot failed: ") and "symlink" in why
    assert sweep.ledger.get(answer["submission_id"]).snapshot_error == why
    assert load_snapshots(sweep.root, run_id) == [] and not (sweep.root / "blobs").exists()
    write_result(
        sweep,
        run_id,
        status="ok",
        failure_reason=None,
        agent_exit_code=0,
        agent_seconds=1.0,
        started_at=now(),
        ended_at=now(),
    )
    report = write_run_report(sweep, run_id)
    assert f"**no code record**: {why}" in (report / "summary.md").read_text()
