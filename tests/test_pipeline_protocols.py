"""The reference agent trains in the format it is graded in: for each static task and each protocol, its SFT and
GRPO prompts are the prompts the task's grader sends for the same item, its SFT completions are replies that grader
scores right, and its rewards read them as that grader does. A short run under `paper` (the protocol named in the
workspace's run_meta.json) submits models the grader scores under `paper`. CPU, tiny model."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

pytest.importorskip("trl")

from transformers import AutoTokenizer  # noqa: E402

from a2rl.reference import pipeline as P  # noqa: E402
from a2rl.reference.formats import STATIC_FORMATS, Chat, check_rows  # noqa: E402
from a2rl.spec.tasks import get_task  # noqa: E402
from a2rl.store.stages import StageLog  # noqa: E402
from a2rl.tasklib.evaluator import load_evaluator
from a2rl.tasklib.pairwise import generate_answers  # noqa: E402
from a2rl.tasklib.prepare import ensure_prepared
from a2rl.tasklib.taskdata import read_jsonl, write_jsonl  # noqa: E402
from fakes import FakeGenerator  # noqa: E402
from test_pipeline_routes import SOURCES, run_pipeline, scored  # noqa: E402

N = 3  # train rows graded as if they were held out
OPTIONS = {"gsm8k": {}, "humaneval": {"workers": 1}}
WRONG = {
    "gsm8k": lambda reply: re.sub(r"(answer is|####) \S+", r"\1 0.5", reply),  # another final answer
    "humaneval": lambda reply: reply.replace("return ", "return None  # "),
}


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    return {
        name: ensure_prepared(get_task(name), root, source=SOURCES.get(name))
        for name in ("gsm8k", "humaneval", "alpacaeval")
    }


@pytest.fixture(scope="module")
def tok(tiny_model):
    return AutoTokenizer.from_pretrained(tiny_model)


def graded_as_heldout(task: str, data, rows: list[dict], tmp_path: Path) -> Path:
    """A held-out folder whose test items are `rows` (train rows), beside the task's other held-out files."""
    heldout = tmp_path / "heldout"
    shutil.copytree(data.heldout_dir, heldout)
    write_jsonl(heldout / "test.jsonl", rows)
    return heldout


@pytest.mark.parametrize("protocol", ["paper", "a2rl"])
@pytest.mark.parametrize("task", ["gsm8k", "humaneval"])
def test_sft_and_grpo_prompts_are_what_the_grader_sends(task, protocol, prepared, tok, tmp_path):
    data = prepared[task]
    rows = read_jsonl(data.train_dir / "train.jsonl")
    route = check_rows(get_task(task).spec.train_format, rows).routes[protocol]
    pairs, grpo = route.sft_pairs(rows, Chat(tok)), route.grpo_rows(rows, Chat(tok))
    items = rows[-N:]  # past gsm8k's exemplars
    reply = {p["prompt"]: p["completion"].removesuffix(tok.eos_token) for p in pairs[-N:]}
    grader = FakeGenerator(script=lambda prompt: reply[prompt], cut=True, tokenizer=tok)
    result = load_evaluator(get_task(task)).evaluate(
        grader,
        graded_as_heldout(task, data, items, tmp_path),
        {**get_task(task).spec.eval, **OPTIONS[task], "protocol": protocol},
    )
    assert grader.prompts == [p["prompt"] for p in pairs[-N:]] == [g["prompt"] for g in grpo[-N:]]
    assert result["score"] == 100.0  # the SFT completions are replies the grader scores right...
    extra = {k: [g[k] for g in grpo[-N:]] for k in grpo[0] if k != "prompt"}
    right = route.reward(list(reply.values()), prompts=grader.prompts, **extra)
    wrong = route.reward([WRONG[task](r) for r in reply.values()], prompts=grader.prompts, **extra)
    assert (right, wrong) == ([1.0] * N, [0.0] * N)  # ...and the reward reads them as the grader does


def test_instruction_prompts_are_what_the_grader_sends_under_both_protocols(prepared, tok):
    rows = read_jsonl(prepared["alpacaeval"].train_dir / "train.jsonl")[:N]
    rows = [{"instruction": r["instruction"], "output": r["output"]} for r in rows]  # as the test rows: no "input"
    routes = STATIC_FORMATS["instruction_reference"].routes
    assert routes["paper"] is routes["a2rl"]  # alpacaeval's evaluate answers with generate_answers under both
    policy = FakeGenerator("ok", tokenizer=tok)
    generate_answers(policy, [r["instruction"] for r in rows], max_new_tokens=8, batch_size=8)
    assert [p["prompt"] for p in routes["paper"].sft_pairs(rows, Chat(tok))] == policy.prompts


THINKING = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}"
    "<|assistant|>\n{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n{% endif %}"
    "{% endif %}"
)  # as Qwen3's: thinking off opens the reply with an empty think block


@pytest.mark.parametrize(
    "fmt, task", [("qa_numeric", "gsm8k"), ("code_with_tests", "humaneval"), ("instruction_reference", "alpacaeval")]
)
def test_chat_prompts_are_rendered_with_the_runs_chat_template_kwargs(
    fmt, task, prepared, tiny_model, tmp_path, monkeypatch
):
    """A model graded with a preset that sets chat_template_kwargs (qwen3-nothinking) trains on the prompts the
    grader renders with them, as run_meta.json tells them."""
    from a2rl.spec.generation import get_preset

    tok = AutoTokenizer.from_pretrained(tiny_model)
    tok.chat_template = THINKING
    preset = get_preset("qwen3-nothinking")
    monkeypatch.setenv("WORKSPACE", str(tmp_path))
    (tmp_path / "run_meta.json").write_text(json.dumps({"chat_template_kwargs": preset.chat_template_kwargs}))
    chat = Chat(tok, P.template_kwargs())
    rows = read_jsonl(prepared[task].train_dir / "train.jsonl")[-N:]
    rows = [{k: v for k, v in r.items() if k != "input"} for r in rows]  # alpacaeval: as the test rows
    prompts = [p["prompt"] for p in STATIC_FORMATS[fmt].routes["paper"].sft_pairs(rows, chat)]
    assert all("<think>" in p for p in prompts)
    grader = FakeGenerator("ok", tokenizer=tok, preset=preset)
    if task == "alpacaeval":
        generate_answers(grader, [r["instruction"] for r in rows], max_new_tokens=8, batch_size=8)
    else:
        load_evaluator(get_task(task)).evaluate(
            grader,
            graded_as_heldout(task, prepared[task], rows, tmp_path),
            {**get_task(task).spec.eval, **OPTIONS[task], "protocol": "paper"},
        )
    assert grader.prompts == prompts


def test_chat_template_kwargs_default_to_none_and_must_be_a_mapping(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKSPACE", str(tmp_path))
    assert P.template_kwargs() == {}  # no run_meta.json
    (tmp_path / "run_meta.json").write_text(json.dumps({"chat_template_kwargs": ["enable_thinking"]}))
    with pytest.raises(ValueError, match="chat_template_kwargs must be a mapping"):
        P.template_kwargs()


def test_the_protocol_comes_from_the_workspaces_run_meta(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKSPACE", str(tmp_path))
    assert P.protocol(P.parse_args([])) == "paper"  # no run_meta.json: the default protocol
    (tmp_path / "run_meta.json").write_text(json.dumps({"protocol": "a2rl"}))
    assert P.protocol(P.parse_args([])) == "a2rl"
    assert P.protocol(P.parse_args(["--protocol", "paper"])) == "paper"
    (tmp_path / "run_meta.json").write_text(json.dumps({"protocol": "exact"}))
    with pytest.raises(ValueError, match="names protocol 'exact'.*pass --protocol"):
        P.protocol(P.parse_args([]))


@pytest.mark.slow
@pytest.mark.parametrize(
    "task_name,options",
    [("gsm8k", {"limit": 2, "max_new_tokens": 32}), ("humaneval", {"limit": 2, "max_new_tokens": 32})],
)
def test_a_short_run_under_paper_submits_models_paper_scores(task_name, options, tmp_path, tiny_model, monkeypatch):
    task = get_task(task_name)
    data = ensure_prepared(task, tmp_path / "data", source=SOURCES.get(task_name))
    monkeypatch.setenv("WORKSPACE", str(tmp_path))
    (tmp_path / "run_meta.json").write_text(json.dumps({"protocol": "paper"}))  # what the run tells the agent
    out = tmp_path / "out"
    proc = run_pipeline(
        data.train_dir,
        tiny_model,
        out,
        task.spec.train_format,
        "--sft-steps",
        "2",
        "--sft-batch-size",
        "2",
        "--grpo-steps",
        "1",
        "--grpo-prompts",
        "2",
        "--num-generations",
        "2",
        "--max-completion-length",
        "16",
    )
    assert "prompted as protocol paper grades" in proc.stdout
    for stage in ("sft", "grpo"):
        assert scored(task_name, tmp_path / "data", out / stage, out, protocol="paper", **options) >= 0.0
    stages = StageLog.load(out / "stages.json").stages
    assert [(s.name, s.steps, s.hyperparameters["protocol"]) for s in stages] == [
        ("sft", 2, "paper"),
        ("grpo", 1, "paper"),
    ]
    assert stages[1].hyperparameters["reward"] == STATIC_FORMATS[task.spec.train_format].routes["paper"].reward.__name__
