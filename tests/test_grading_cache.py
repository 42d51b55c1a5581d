"""The grading cache (a submission whose weights, config and tokenizer equal an already graded one's, under the same
task, evaluator version, backend settings and preset, reuses its score; the ledger says so), the generation preset
recorded in every ledger entry, and one engine reused across a grader's submissions."""

from __future__ import annotations

import shutil
import sys

import pytest

from a2rl.grading import stages
from a2rl.grading.daemon import GradingDaemon
from a2rl.run.budget import Budget
from a2rl.run.submit import RunSubmitter
from a2rl.run.workspace import create_workspace
from a2rl.scheduling.launcher import open_sweep
from a2rl.spec.generation import get_preset
from a2rl.spec.tasks import get_task
from a2rl.tasklib.prepare import ensure_prepared
from conftest import FIXTURES, REPO, write_sweep

sys.path.insert(0, str(FIXTURES / "agents"))
from variants import make_variant  # noqa: E402


def make_run(tmp_path, tiny_model, **fields):
    """A run's sweep, workspace and a `submit(path) -> ledger entry` driving the given grader by hand."""
    sweep, (spec,) = open_sweep(write_sweep(tmp_path, **fields), tmp_path / "sd")
    task = get_task("echo", [FIXTURES / "tasks"])
    ws = create_workspace(
        sweep.workspace(spec.run_id),
        task=task,
        data=ensure_prepared(task, sweep.data_root()),
        model_dir=tiny_model,
        budget_s=600,
        source_tree=REPO,
    )
    submitter = RunSubmitter(sweep, spec, ws, Budget(600))

    def submit(grader: GradingDaemon, path) -> object:
        sid = submitter.submit(str(path), wait=False)["submission_id"]
        while (claim := sweep.queue.claim(grader.holder, 60, sweep.ledger.has)) is not None:
            grader.grade(claim)
        return sweep.ledger.get(sid)

    return sweep, ws, submit


@pytest.mark.slow  # 3-9 s: kept out of the fast layer
def test_same_weights_reuse_the_score_and_the_ledger_says_so(tmp_path, tiny_model, monkeypatch):
    sweep, ws, submit = make_run(tmp_path, tiny_model)
    grader = GradingDaemon(sweep)
    first = submit(grader, make_variant(tiny_model, ws.output / "a", score=40, salt=5))
    compared = []  # a cache hit takes the earlier entry's lineage: the weights are not streamed again
    monkeypatch.setattr(
        stages, "submission_lineage", lambda *a: compared.append(a) or pytest.fail("lineage computed again")
    )
    again = submit(grader, shutil.copytree(ws.output / "a", ws.output / "a-copy"))
    monkeypatch.undo()
    assert not compared and again.lineage == first.lineage and first.lineage.verdict == "derived"
    assert first.status == again.status == "scored" and again.score == first.score == 40
    assert first.cached_from is None and again.cached_from == first.submission_id
    assert again.grading_key == first.grading_key and again.weights_hash == first.weights_hash
    # another grader of the sweep (a fresh process) finds it in the ledger
    other = submit(GradingDaemon(sweep, 1), shutil.copytree(ws.output / "a", ws.output / "a-copy2"))
    assert other.cached_from == first.submission_id
    # other weights, or the same weights with another config, are evaluated
    trained = submit(grader, make_variant(tiny_model, ws.output / "b", score=40, salt=6))
    reconfigured = submit(grader, make_variant(tiny_model, ws.output / "c", score=55, salt=5))
    assert trained.cached_from is None and trained.grading_key != first.grading_key
    assert reconfigured.cached_from is None and reconfigured.score == 55
    assert first.backend == {
        "backend": "transformers",
        "device": "cpu",
        "gpus": 0,
        "gpu_memory_utilization": 0.9,
        "max_model_len": None,
        "batch_size": None,
    }


@pytest.mark.slow  # 3-9 s: kept out of the fast layer
def test_cache_key_separates_backend_settings(tmp_path, tiny_model):
    """A submission graded under other backend settings (here a batch size) is evaluated again."""
    sweep, ws, submit = make_run(tmp_path, tiny_model)
    first = submit(GradingDaemon(sweep), make_variant(tiny_model, ws.output / "a", score=40, salt=5))
    relaunched = GradingDaemon(sweep)
    relaunched.settings = relaunched.settings.model_copy(update={"batch_size": 7})  # another grader.batch_size
    again = submit(relaunched, shutil.copytree(ws.output / "a", ws.output / "a2"))
    assert again.cached_from is None and again.grading_key != first.grading_key


def test_every_entry_records_its_generation_preset(tmp_path, tiny_model):
    sweep, ws, submit = make_run(
        tmp_path,
        tiny_model,
        models=[{"name": "tiny-llama", "path": "builtin:tiny-llama", "generation": "qwen3-thinking"}],
    )
    grader = GradingDaemon(sweep)
    scored = submit(grader, make_variant(tiny_model, ws.output / "a", score=40, salt=5))
    (ws.output / "empty").mkdir()
    invalid = submit(grader, ws.output / "empty")
    assert invalid.status == "invalid"
    expected = get_preset("qwen3-thinking").record()
    assert scored.generation == invalid.generation == expected
    assert expected["temperature"] == 0.6 and expected["chat_template_kwargs"] == {"enable_thinking": True}


def test_default_preset_is_greedy(tmp_path, tiny_model):
    sweep, ws, submit = make_run(tmp_path, tiny_model)
    entry = submit(GradingDaemon(sweep), make_variant(tiny_model, ws.output / "a", score=40, salt=5))
    assert entry.generation["name"] == "greedy" and entry.generation["temperature"] == 0


def test_unknown_preset_is_a_spec_error(tmp_path):
    from conftest import errors_of

    path = write_sweep(tmp_path, models=[{"name": "m", "path": "builtin:tiny-llama", "generation": "qwen9"}])
    assert any(e.startswith("models[0].generation: unknown generation preset 'qwen9'") for e in errors_of(path))


@pytest.mark.slow  # grades four submissions
def test_one_engine_serves_submissions_of_one_architecture(tmp_path, tiny_model):
    sweep, ws, submit = make_run(tmp_path, tiny_model)
    grader = GradingDaemon(sweep)
    scores = [submit(grader, make_variant(tiny_model, ws.output / f"v{i}", score=40, salt=i)).score for i in range(3)]
    assert scores == [40, 40, 40]
    # the baseline loaded it first; every submission after reloaded weights
    assert (grader.engine.starts, grader.engine.reloads) == (2, 2)
    submit(grader, make_variant(tiny_model, ws.output / "other", score=60, salt=9))  # other config.json
    assert grader.engine.starts == 3


@pytest.mark.slow  # ~8 s: decodes to the end of the tiny model's context for the baseline and the submission
def test_the_ledger_says_when_new_tokens_were_capped_at_the_context(tmp_path, tiny_model):
    """A prompt 12 positions short of the tiny model's 512, and 8,192 new tokens asked (the paper protocol's
    HumanEval limit): generation stops at the context and the ledger entry says so."""
    sweep, ws, submit = make_run(
        tmp_path,
        tiny_model,
        grader={
            "poll_s": 0.05,
            "lease_s": 5,
            "idle_timeout_s": 120,
            "task_options": {"echo": {"room": 12, "max_new_tokens": 8192}},
        },
    )
    entry = submit(GradingDaemon(sweep), make_variant(tiny_model, ws.output / "a", score=40, salt=5))
    assert entry.status == "scored" and entry.score == 40
    assert entry.details["context_cap"] == {
        "context": 512,
        "max_new_tokens": 8192,
        "capped": 1,
        "filled": 1,
        "no_room": 0,
    }
