"""Whole runs through the real launcher, local executor, agent process, HTTP API, queue, grader and ledger,
with test agents that submit, attack their own run, or refuse to stop."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from a2rl.store.results import RunResult
from a2rl.store.sweepdir import SweepDir
from conftest import a2rl, write_sweep


def launch(tmp_path: Path, **fields) -> SweepDir:
    path = write_sweep(tmp_path, **fields)
    proc = a2rl("launch", str(path), "--sweep-dir", str(tmp_path / "sd"), "--wait", timeout=600)
    assert "sweep dir:" in proc.stdout, proc.stdout + proc.stderr
    return SweepDir(tmp_path / "sd")


def only_result(sweep: SweepDir) -> RunResult:
    (run,) = sweep.runs()
    return RunResult.load(sweep.result_path(run.run_id))


def results_by_agent(sweep: SweepDir) -> dict[str, RunResult]:
    """Each run's result by its agent entry (a sweep of one run per agent)."""
    return {run.agent.key: RunResult.load(sweep.result_path(run.run_id)) for run in sweep.runs()}


@pytest.mark.slow  # a whole sweep
def test_three_submissions_are_scored_in_order(tmp_path):
    sweep = launch(tmp_path, agents=[{"name": "submitter", "args": {"count": 3}}])
    result = only_result(sweep)
    assert result.status == "ok", result.failure_reason
    assert result.scores == [10.0, 20.0, 30.0]
    assert (result.baseline, result.best, result.improvement) == (0.0, 30.0, 30.0)
    assert result.submissions == result.valid_submissions == 3
    entries = sweep.ledger.entries(result.run_id)
    assert [e.seq for e in entries] == [1, 2, 3] and not any(e.copy_of_base for e in entries)
    lines = (sweep.workspace(result.run_id) / "output" / "answers.jsonl").read_text().splitlines()
    answers = [json.loads(line)["answer"] for line in lines]
    assert [a["best"] for a in answers] == [10.0, 20.0, 30.0]
    assert [a["total_submissions"] for a in answers] == [1, 2, 3]
    assert all(a["baseline_score"] == 0.0 for a in answers)
    # submitted weights are frozen for grading, then dropped (keep_artifacts is off)
    assert not any((sweep.root / "submissions").glob("*/*.safetensors"))


@pytest.mark.slow  # a whole sweep
def test_relaunch_skips_finished_runs(tmp_path):
    sweep = launch(tmp_path)
    before = only_result(sweep)
    proc = a2rl("launch", str(sweep.root), "--wait")
    assert proc.returncode == 0, proc.stderr
    assert "all 1 runs have finished; nothing to submit" in proc.stdout
    assert only_result(sweep) == before


@pytest.mark.slow  # a whole sweep
def test_an_agent_cannot_change_what_is_recorded(tmp_path):
    sweep = launch(tmp_path, agents=["tamper"])
    result = only_result(sweep)
    ws = sweep.workspace(result.run_id)
    report = json.loads((ws / "output" / "report.json").read_text())
    assert report["submit_rc"] == 0, report["submit"]
    # the attack happened...
    assert json.loads((ws / "scores.json").read_text())["score"] == 100.0
    assert (ws / "output" / "copy" / "results.json").exists()
    # ...and changed nothing: the copy is recognised as the base model and scores the baseline
    (entry,) = sweep.ledger.entries(result.run_id)
    assert entry.copy_of_base and entry.score == 0.0
    assert json.loads(report["submit"])["note"].startswith("identical to the base model")
    assert (result.best, result.improvement, result.baseline) == (0.0, 0.0, 0.0)
    assert result.budget_s == 60.0
    # nothing of the sweep directory or the held-out split was reachable from the workspace or environment
    assert not any(str(sweep.root) in v for v in report["env"].values())
    assert report["env"]["HOME"] == str(ws / "home")  # not the launcher's, where the data root lives
    assert not any("heldout" in p or p.endswith("test.jsonl") for p in report["seen"])
    assert sorted(report["env"]) == sorted(
        set(report["env"])
        & {
            "PATH",
            "HOME",
            "LANG",
            "TMPDIR",
            "TASK",
            "EVAL_PROTOCOL",
            "BASE_MODEL",
            "WORKSPACE",
            "MODEL_PATH",
            "DATA_PATH",
            "OUTPUT_DIR",
            "GRADING_SERVER_URL",
            "GRADING_TOKEN",
            "OMP_NUM_THREADS",
            "MKL_NUM_THREADS",
            "TOKENIZERS_PARALLELISM",
            "HF_HUB_OFFLINE",
            "HF_DATASETS_OFFLINE",
            "TRANSFORMERS_OFFLINE",
            "PYTHONUNBUFFERED",
            "A2RL_RUN_TOKEN",
            "CUDA_VISIBLE_DEVICES",
            "PWD",
            "HTTPS_PROXY",
            "https_proxy",
            "HTTP_PROXY",
            "http_proxy",
            "NO_PROXY",
            "no_proxy",
        }
    )
    # the train split is a read-only copy, not a link into the data root
    assert not (ws / "data").is_symlink()
    assert (ws / "data" / "train.jsonl").stat().st_mode & 0o222 == 0


@pytest.mark.slow  # a whole sweep
def test_budget_end_stops_the_agent_and_its_setsid_children(tmp_path):
    sweep = launch(tmp_path, agents=["sleeper"], budget=4)
    result = only_result(sweep)
    assert result.status == "timeout"
    assert result.agent_seconds >= 4.0
    assert "budget used up: stopping the agent" in (sweep.run_dir(result.run_id) / "agent.log").read_text()
    seen = json.loads((sweep.workspace(result.run_id) / "output" / "pids.json").read_text())
    time.sleep(0.5)
    assert live_processes_with(seen["tag"]) == [] and live_processes_with(seen["agent"]) == []


def live_processes_with(needle: str) -> list[int]:
    """Host pids of live (not zombie) processes whose command line contains `needle`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if (
                needle.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
                and "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()
            ):
                found.append(int(pid))
        except OSError:
            continue
    return found


@pytest.mark.slow  # a whole sweep
def test_baseline_agent_has_no_submissions(tmp_path):
    result = only_result(launch(tmp_path))
    assert result.status == "ok" and result.submissions == 0 and result.best is None
    assert result.baseline == 0.0


@pytest.mark.slow  # a whole sweep
def test_a_failed_baseline_is_an_error_not_zero(tmp_path):
    broken = tmp_path / "tasks" / "broken"
    broken.mkdir(parents=True)
    src = Path(__file__).parent / "fixtures" / "tasks" / "echo"
    for f in ("description.md", "prepare.py"):
        (broken / f).write_text((src / f).read_text())
    (broken / "task.yaml").write_text((src / "task.yaml").read_text().replace("name: echo", "name: broken"))
    (broken / "evaluator.py").write_text(
        "def evaluate(generator, heldout_dir, options):\n    raise RuntimeError('judge unreachable')\n"
    )
    path = write_sweep(tmp_path, tasks=["broken"], task_paths=[str(tmp_path / "tasks")])
    proc = a2rl("launch", str(path), "--sweep-dir", str(tmp_path / "sd"), "--wait")
    assert "baseline for broken/tiny-llama/paper failed: RuntimeError: judge unreachable" in proc.stdout
    result = only_result(SweepDir(tmp_path / "sd"))
    assert result.baseline is None and "judge unreachable" in result.baseline_error
    table = a2rl("aggregate", str(tmp_path / "sd"), check=True).stdout
    assert "FAILED: RuntimeError: judge unreachable" in table
