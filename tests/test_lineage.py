"""Lineage of submissions against the sweep's base model (a2rl/grading/lineage.py): copy, derived or foreign, with
its figures in the ledger, grader.foreign flag|refuse, and the marks in the run report, the tables and a2rl status.
The slow test trains with the reference pipeline (SFT, GRPO, LoRA merged) and another seed's model on the same rows."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from a2rl.grading import lineage as L
from a2rl.grading.daemon import GradingDaemon
from a2rl.grading.onepass import one_pass_lineage, stream
from a2rl.grading.profiles import base_profile
from a2rl.reporting.aggregate import Sweeps, failures_table, format_tables, long_table
from a2rl.reporting.html import write_report as write_html_report
from a2rl.reporting.runreport import write_run_report
from a2rl.store.results import write_result
from conftest import FIXTURES, a2rl
from test_grading_cache import make_run

sys.path.insert(0, str(FIXTURES / "agents"))
from variants import make_variant  # noqa: E402


@pytest.fixture(scope="session")
def other_seed_model(tiny_model, tmp_path_factory) -> Path:
    """The tiny model's architecture and tokenizer with weights initialised from another seed."""
    from transformers import AutoConfig, LlamaForCausalLM

    out = tmp_path_factory.mktemp("seed1")
    torch.manual_seed(1)
    LlamaForCausalLM(AutoConfig.from_pretrained(tiny_model)).save_pretrained(out, safe_serialization=True)
    for f in tiny_model.glob("tokenizer*"):
        shutil.copy(f, out / f.name)
    return out


def rewrite(src: Path, dest: Path, change) -> Path:
    """A copy of the model in `src` whose tensors are `change(tensors)` (a dict of name -> tensor)."""
    shutil.copytree(src, dest)
    f = dest / "model.safetensors"
    save_file(change(load_file(f)), f, metadata={"format": "pt"})
    return dest


def test_a_fine_tune_is_derived_and_another_seeds_model_foreign(tmp_path, tiny_model, other_seed_model):
    def nudge(t):  # every tensor moved by 30% of its norm in a random direction: far more than a fine-tune
        g = torch.Generator().manual_seed(0)
        return {k: v + 0.3 * v.norm() / v.numel() ** 0.5 * torch.randn(v.shape, generator=g) for k, v in t.items()}

    moved = L.lineage(rewrite(tiny_model, tmp_path / "moved", nudge), tiny_model)
    assert moved.verdict == "derived" and moved.tokenizer == "identical" and moved.close_share == 1.0
    assert 0.9 < moved.cosine_min < 1.0 and 0.25 < moved.rel_l2_median < 0.35
    assert moved.tensors == len(load_file(tiny_model / "model.safetensors")) and len(moved.farthest) == L.FARTHEST
    other = L.lineage(other_seed_model, tiny_model)
    assert other.verdict == "foreign" and other.close_share == 0.0 and abs(other.cosine_median) < 0.05
    assert other.rel_l2_median > 1.3  # two independent draws: sqrt(2) apart
    assert "0% of its matrix parameters" in other.reason and other.tokenizer == "identical"


def test_bf16_weights_of_the_base_are_derived(tmp_path, tiny_model):
    half = L.lineage(
        rewrite(tiny_model, tmp_path / "bf16", lambda t: {k: v.bfloat16() for k, v in t.items()}), tiny_model
    )
    assert half.verdict == "derived" and half.cosine_min > 0.9999 and half.rel_l2_max < 0.01


def test_streaming_in_slices_gives_the_whole_tensors_figures(tmp_path, tiny_model, other_seed_model, monkeypatch):
    whole, sizes, nbytes = L.tensor_distances(other_seed_model, tiny_model)
    monkeypatch.setattr(L, "CHUNK_ELEMENTS", 1000)  # a few rows per slice
    sliced, _, sliced_bytes = L.tensor_distances(other_seed_model, tiny_model)
    assert nbytes == sliced_bytes == 2 * sum(n for n, _ in sizes.values()) * 4  # fp32, both models, read once
    for a, b in zip(whole, sliced):
        assert a.name == b.name and a.cosine == pytest.approx(b.cosine, abs=1e-6)
        assert a.rel_l2 == pytest.approx(b.rel_l2, rel=1e-5)
    emb = next(d for d in whole if d.name == "model.embed_tokens.weight")
    base, other = load_file(tiny_model / "model.safetensors"), load_file(other_seed_model / "model.safetensors")
    b, s = base[emb.name].flatten().double(), other[emb.name].flatten().double()
    assert emb.cosine == pytest.approx(float(s @ b / (s.norm() * b.norm())), abs=1e-6)
    assert emb.rel_l2 == pytest.approx(float((s - b).norm() / b.norm()), rel=1e-5)


def test_another_architecture_or_tokenizer_is_foreign(tmp_path, tiny_model):
    def drop_one(t):
        t.pop(sorted(t)[-1])
        return t

    lacking = L.lineage(rewrite(tiny_model, tmp_path / "lacking", drop_one), tiny_model)
    assert lacking.verdict == "foreign" and "lacks 1 of the base model's tensors" in lacking.reason
    wider = rewrite(tiny_model, tmp_path / "wider", lambda t: {k: torch.cat([v, v]) for k, v in t.items()})
    assert "has shape" in L.lineage(wider, tiny_model).reason
    retyped = shutil.copytree(tiny_model, tmp_path / "retyped")
    config = json.loads((retyped / "config.json").read_text())
    (retyped / "config.json").write_text(json.dumps({**config, "model_type": "mistral"}))
    assert "architecture" in L.lineage(retyped, tiny_model).reason
    # the submission's own tokenizer, re-saved with the same vocabulary, is the base's; another vocabulary is not
    resaved = shutil.copytree(tiny_model, tmp_path / "resaved")
    tok = json.loads((resaved / "tokenizer.json").read_text())
    (resaved / "tokenizer.json").write_text(json.dumps(tok, indent=4))
    same = L.lineage(resaved, tiny_model)
    assert same.verdict == "derived" and same.tokenizer == "same vocabulary"
    vocab = tok["model"]["vocab"]
    a, b = sorted(vocab)[100:102]
    vocab[a], vocab[b] = vocab[b], vocab[a]  # two tokens swap ids
    (resaved / "tokenizer.json").write_text(json.dumps(tok))
    swapped = L.lineage(resaved, tiny_model)
    assert swapped.verdict == "foreign" and swapped.tokenizer == "different"
    assert swapped.reason == "its tokenizer differs from the base model's"
    head = rewrite(
        tiny_model, tmp_path / "head", lambda t: {**t, "lm_head.weight": t["model.embed_tokens.weight"].clone()}
    )
    assert L.lineage(head, tiny_model).verdict == "derived"  # the tied head, saved explicitly
    bare = shutil.copytree(tiny_model, tmp_path / "bare", ignore=shutil.ignore_patterns("tokenizer*"))
    assert L.lineage(bare, tiny_model).tokenizer == "base"  # the grader loads the base's


def foreign_variant(other: Path, dest: Path, score: float) -> Path:
    """Another seed's model, as the echo task scores it (its config says its score)."""
    shutil.copytree(other, dest)
    config = json.loads((dest / "config.json").read_text())
    (dest / "config.json").write_text(json.dumps({**config, "a2rl_test_score": score}))
    return dest


@pytest.mark.slow
def test_flag_scores_a_foreign_model_and_marks_it_everywhere(tmp_path, tiny_model, other_seed_model, capsys):
    sweep, ws, submit = make_run(tmp_path, tiny_model)
    grader = GradingDaemon(sweep)
    copy = submit(grader, shutil.copytree(tiny_model, ws.output / "copy"))
    assert copy.copy_of_base and copy.lineage.verdict == "copy"
    own = submit(grader, make_variant(tiny_model, ws.output / "own", score=30, salt=1))
    assert own.status == "scored" and own.lineage.verdict == "derived" and own.lineage.cosine_min > 0.9
    alien = submit(grader, foreign_variant(other_seed_model, ws.output / "alien", 70))
    assert alien.status == "scored" and alien.score == 70 and alien.foreign
    assert alien.lineage.close_share == 0.0 and alien.lineage.cosine_threshold == L.COSINE_MIN
    assert sweep.ledger.get(alien.submission_id).lineage == alien.lineage  # signed and read back whole
    run_id = own.run_id
    result = write_result(
        sweep,
        run_id,
        status="ok",
        failure_reason=None,
        agent_exit_code=0,
        agent_seconds=1.0,
        started_at=0.0,
        ended_at=1.0,
    )
    assert result.best == 70 and result.foreign_submissions == [3]
    report = write_run_report(sweep, run_id, result)
    metrics = json.loads((report / "metrics.json").read_text())
    assert metrics["failure_type"] == "foreign_model" and metrics["foreign_submissions"] == [3]
    summary = (report / "summary.md").read_text()
    assert "**FOREIGN MODEL**: submission(s) 3 not plausibly trained from the base model" in summary
    assert "- lineage: foreign: only 0% of its matrix parameters" in summary
    assert "- lineage: copy: the base model's tensors" in summary
    rows = [json.loads(line) for line in (report / "summary.jsonl").read_text().splitlines()]
    assert [r["lineage"] for r in rows] == ["copy", "derived", "foreign"]
    sw = Sweeps([sweep])
    text = format_tables(sw, [long_table(sw), failures_table(sw)], "simple")
    assert (
        f"# FOREIGN: 1 run(s) submitted models not plausibly trained from the base model: {run_id} (submission 3)"
        in text
    )
    assert "foreign_model×1" in text  # the --failures table counts it
    assert json.loads(format_tables(sw, [long_table(sw)], "json"))["foreign"] == {run_id: [3]}
    page = write_html_report(sw, tmp_path / "report").read_text()
    assert f"FOREIGN: 1 run(s) submitted models not plausibly trained from the base model: {run_id}" in page
    assert "70.00 FOREIGN" in page
    out = a2rl("status", str(sweep.root), check=True).stdout
    assert "70.00 FOREIGN" in out and "FOREIGN: 1 run(s)" in out


@pytest.mark.slow
def test_refuse_refuses_a_foreign_model_with_a_one_line_error(tmp_path, tiny_model, other_seed_model):
    sweep, ws, submit = make_run(tmp_path, tiny_model, grader={"poll_s": 0.05, "lease_s": 5, "foreign": "refuse"})
    grader = GradingDaemon(sweep)
    alien = submit(grader, foreign_variant(other_seed_model, ws.output / "alien", 70))
    assert alien.status == "invalid" and alien.score is None and alien.foreign
    assert alien.error.startswith("refused: foreign model (grader.foreign: refuse): foreign: only 0% of its matrix")
    assert "\n" not in alien.error
    own = submit(grader, make_variant(tiny_model, ws.output / "own", score=30, salt=1))
    assert own.status == "scored" and own.score == 30  # derived models are graded as before


@pytest.mark.slow
def test_the_pipelines_models_are_derived_and_another_seeds_trained_on_the_same_rows_foreign(
    tmp_path, tiny_model, other_seed_model
):
    from a2rl.spec.tasks import get_task
    from a2rl.tasklib.prepare import ensure_prepared
    from test_pipeline_routes import run_pipeline

    data = ensure_prepared(get_task("arith"), tmp_path / "data").train_dir
    sft = ["--sft-steps", "30", "--sft-batch-size", "8", "--no-schedule"]
    grpo = ["--grpo-steps", "2", "--grpo-prompts", "2", "--num-generations", "2", "--max-completion-length", "8"]
    run_pipeline(data, tiny_model, tmp_path / "full", "qa_short", *sft, *grpo)
    run_pipeline(data, tiny_model, tmp_path / "lora", "qa_short", *sft, "--grpo-steps", "0", "--lora-r", "16")
    run_pipeline(data, other_seed_model, tmp_path / "other", "qa_short", *sft, "--grpo-steps", "0")
    profile = base_profile(tiny_model).samples
    for model in (tmp_path / "full" / "sft", tmp_path / "full" / "grpo", tmp_path / "lora" / "sft"):
        found = L.lineage(model, tiny_model)
        assert found.verdict == "derived" and found.close_share == 1.0, (model, found)
        assert found.rel_l2_max > 0.001  # trained, not a copy
        # the grader's one read of the weights (grading/onepass.py) gives the same verdict and figures
        same = one_pass_lineage(model, tiny_model, stream(model), profile)
        assert (same.verdict, same.close_share) == (found.verdict, found.close_share)
        for f in ("cosine_min", "cosine_median", "rel_l2_median", "rel_l2_max"):
            assert getattr(same, f) == pytest.approx(getattr(found, f), abs=1e-5), (model, f)
    other = L.lineage(tmp_path / "other" / "sft", tiny_model)
    assert other.verdict == "foreign" and other.close_share == 0.0, other
    scanned = stream(tmp_path / "other" / "sft")
    assert one_pass_lineage(tmp_path / "other" / "sft", tiny_model, scanned, profile).verdict == "foreign"
    assert other.rel_l2_median > 1.0  # it moved as far from its own start as the others did, and is no nearer


def test_refuse_refuses_a_foreign_model_in_the_fast_layer(tmp_path, tiny_model):
    """grader.foreign: refuse without the slow layer's other-seed model: a model of another architecture is
    foreign without a tensor streamed, and refused, never scored (under `flag` its config's score, 70)."""
    sweep, ws, submit = make_run(tmp_path, tiny_model, grader={"foreign": "refuse"})
    alien = make_variant(tiny_model, ws.output / "alien", score=70, salt=2)
    config = json.loads((alien / "config.json").read_text())
    (alien / "config.json").write_text(json.dumps({**config, "model_type": "mistral"}))
    entry = submit(GradingDaemon(sweep), alien)
    assert entry.foreign and entry.lineage.reason.startswith("its architecture")
    assert (entry.status, entry.score) == ("invalid", None)
    assert entry.error == f"refused: foreign model (grader.foreign: refuse): {entry.lineage.summary()}"
