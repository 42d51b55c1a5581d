"""The pipeline's interactive route trains in the prompts the run's protocol grades: for each interactive task and
each protocol, the SFT prompts of an expert trajectory and the GRPO prompts of its states are the prompts the task's
evaluator sends at the same steps of the same episode, when a scripted generator replays the expert's replies (so
the replies are ones that loop reads back as the expert's actions); also with a context so short that the grader
drops old turns (a2rl) or ends the episode (paper). CPU, the tiny model's tokenizer, no training."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest.importorskip("trl")

from transformers import AutoTokenizer  # noqa: E402

from a2rl.reference.interactive import GraderLoop  # noqa: E402
from a2rl.spec.generation import GenerationPreset, get_preset  # noqa: E402
from a2rl.spec.tasks import get_task  # noqa: E402
from a2rl.tasklib.envs import load_task_env  # noqa: E402
from a2rl.tasklib.evaluator import load_evaluator
from a2rl.tasklib.prepare import ensure_prepared
from a2rl.tasklib.taskdata import read_jsonl, write_jsonl  # noqa: E402
from fakes import FakeGenerator  # noqa: E402
from test_pipeline_envs import prepare_alfworld, prepare_textworld, prepare_webshop  # noqa: E402

BIG = 1 << 20  # a context every prompt fits in


@pytest.fixture(scope="module")
def tok(tiny_model):
    return AutoTokenizer.from_pretrained(tiny_model)


@pytest.fixture(scope="module")
def alfworld(tmp_path_factory):
    return prepare_alfworld(tmp_path_factory.mktemp("alfworld"))


@pytest.fixture(scope="module")
def webshop(tmp_path_factory):
    return prepare_webshop(tmp_path_factory.mktemp("webshop"))


def route_and_grader(
    task: str,
    train: Path,
    graded: Path,
    traj: dict,
    protocol: str,
    tok,
    context: int,
    preset: GenerationPreset | None = None,
    **options,
) -> tuple[list[str], list[str], list[str], dict]:
    """The route's SFT prompts and GRPO prompts (expert states, in step order) for one trajectory, the prompts the
    task's evaluator sends to a generator replaying the route's SFT replies, and the evaluator's result. preset: the
    model's generation preset (the grader's; the route gets its chat_template_kwargs, as run_meta.json has them)."""
    loop = GraderLoop(
        load_task_env(train / "env.py", f"{task}_route_env"),
        train,
        protocol,
        tok,
        context,
        preset.chat_template_kwargs if preset else None,
    )
    pairs, states = loop.expert_steps([traj])
    rows = sorted(loop.grpo_rows(states), key=lambda r: len(r["history"]))
    replies = {p["prompt"]: p["completion"] for p in pairs}
    grader = FakeGenerator(
        script=lambda prompt: replies[prompt], cut=True, tokenizer=tok, context=context, preset=preset
    )
    spec = get_task(task)
    result = load_evaluator(spec).evaluate(grader, graded, {**spec.spec.eval, "protocol": protocol, **options})
    return [p["prompt"] for p in pairs], [r["prompt"] for r in rows], grader.prompts, result


def short_context(tok, prompts: list[str], task_env, protocol: str) -> int:
    """A context in which the third prompt no longer fits as it is (the grader's limit: context - new tokens)."""
    return len(tok(prompts[2], add_special_tokens=True)["input_ids"]) + task_env.MAX_NEW_TOKENS[protocol] - 1


@pytest.mark.parametrize("protocol", ["paper", "a2rl"])
@pytest.mark.slow  # 3-9 s: kept out of the fast layer
def test_alfworld_route_prompts_are_what_the_grader_sends(protocol, alfworld, tok, tmp_path):
    train, _ = alfworld
    traj = read_jsonl(train / "trajectories.jsonl")[0]
    graded = tmp_path / "graded"  # the training game, graded as if held out
    shutil.copytree(train / traj["episode"], graded / traj["episode"])
    sft, grpo, sent, result = route_and_grader("alfworld", train, graded, traj, protocol, tok, BIG)
    assert sent == sft == grpo and len(sft) == len(traj["actions"]) and result["score"] == 100.0
    head = {
        "paper": "Interact with a household to solve a task. Here are two examples.\n",
        "a2rl": load_evaluator(get_task("alfworld")).alf.HEADER,
    }[protocol]
    assert sft[0].startswith(head) and sft[1].endswith({"paper": "\n>", "a2rl": "\nAction:"}[protocol])

    full = sft
    short = short_context(tok, sft, load_evaluator(get_task("alfworld")).alf, protocol)
    sft, grpo, sent, result = route_and_grader("alfworld", train, graded, traj, protocol, tok, short)
    assert sent == sft == grpo
    if protocol == "paper":  # the grader ends the episode at the prompt that no longer fits: nothing to train after
        assert sft == full[:2] and result["score"] == 0.0
    else:  # the grader drops old turns: the route trains on the shortened prompts
        assert len(sft) == len(traj["actions"]) and len(sft[-1]) < len(full[-1]) and result["score"] == 100.0


def webshop_graded(train: Path, tmp_path: Path, protocol: str) -> tuple[dict, Path]:
    """A won trajectory of 4+ steps, and its training goal graded as if held out (paper's goals file or a2rl's)."""
    traj = next(t for t in read_jsonl(train / "trajectories.jsonl") if t["won"] and len(t["actions"]) > 3)
    graded = tmp_path / "graded"
    graded.mkdir()
    shutil.copy(train / "products.jsonl", graded)
    goal = read_jsonl(train / "goals.jsonl")[int(traj["episode"])]
    write_jsonl(graded / load_evaluator(get_task("webshop")).GOALS[protocol], [goal])
    return traj, graded


@pytest.mark.parametrize("protocol", ["paper", "a2rl"])
def test_webshop_route_prompts_are_what_the_grader_sends(protocol, webshop, tok, tmp_path):
    train, _ = webshop
    traj, graded = webshop_graded(train, tmp_path, protocol)
    sft, grpo, sent, result = route_and_grader("webshop", train, graded, traj, protocol, tok, BIG)
    assert sent == sft == grpo and len(sft) == len(traj["actions"]) and result["reward_1_rate"] == 100.0
    if protocol == "paper":  # the chat template, the 5-step window numbered from the start
        assert sft[0].startswith(tok.apply_chat_template([{"role": "system", "content": "x"}], tokenize=False)[:6])
        assert "Observation 1: WebShop [SEP] Instruction:" in sft[0]
    else:
        assert sft[0].startswith(load_evaluator(get_task("webshop")).ws.HEADER)

    full = sft
    short = short_context(tok, sft, load_evaluator(get_task("webshop")).ws, protocol)
    sft, grpo, sent, result = route_and_grader("webshop", train, graded, traj, protocol, tok, short)
    assert sent == sft == grpo
    if protocol == "paper":
        assert sft == full[:2]
    else:
        assert len(sft) == len(traj["actions"]) and len(sft[-1]) < len(full[-1])


def test_chat_prompts_are_rendered_with_the_runs_chat_template_kwargs(webshop, tiny_model, tmp_path):
    """WebShop's paper loop prompts in the chat format: with a preset that sets chat_template_kwargs
    (qwen3-nothinking), the route's prompts are the grader's, rendered with them."""
    from test_pipeline_protocols import THINKING

    tok = AutoTokenizer.from_pretrained(tiny_model)
    tok.chat_template = THINKING
    train, _ = webshop
    traj, graded = webshop_graded(train, tmp_path, "paper")
    sft, grpo, sent, result = route_and_grader(
        "webshop", train, graded, traj, "paper", tok, BIG, preset=get_preset("qwen3-nothinking")
    )
    assert sent == sft == grpo and result["reward_1_rate"] == 100.0
    assert all("<think>" in p for p in sft)


@pytest.mark.parametrize("task", ["alfworld", "webshop"])
def test_the_routes_token_limits_are_the_graders(task):
    """The route keeps prompts inside context - max_new_tokens as the grader does, with env.py's per-protocol
    limits: they must be task.yaml's."""
    spec = get_task(task).spec
    env = load_task_env(get_task(task).folder / "env.py", f"{task}_limits_env")
    assert env.MAX_NEW_TOKENS == {p: spec.eval[p]["max_new_tokens"] for p in ("paper", "a2rl")}


@pytest.fixture(scope="module")
def textworld(tmp_path_factory):
    return prepare_textworld(tmp_path_factory.mktemp("textworld"))


@pytest.mark.parametrize("protocol", ["paper", "a2rl"])
def test_textworld_route_prompts_are_what_the_grader_sends(protocol, textworld, tok, tmp_path):
    """TextWorld has one loop (not in the paper's table): the same prompts under either protocol's name."""
    train, _ = textworld
    traj = read_jsonl(train / "trajectories.jsonl")[0]
    graded = tmp_path / "graded"
    (graded / "games").mkdir(parents=True)
    for f in (train / "games").glob(Path(traj["episode"]).stem + ".*"):  # the game and its sidecar files
        shutil.copy(f, graded / "games")
    sft, grpo, sent, result = route_and_grader("textworld", train, graded, traj, protocol, tok, BIG)
    assert sent == sft == grpo and len(sft) == len(traj["actions"]) and result["score"] == 100.0
    assert sft[0].startswith(load_evaluator(get_task("textworld")).tw.HEADER)
    full, short = sft, len(tok(sft[-1], add_special_tokens=True)["input_ids"]) + 32 - 1  # the last one must shrink
    sft, grpo, sent, result = route_and_grader("textworld", train, graded, traj, protocol, tok, short)
    assert sent == sft == grpo and len(sft) == len(traj["actions"]) and len(sft[-1]) < len(full[-1])


def test_textworld_token_limit_is_the_graders():
    env = load_task_env(get_task("textworld").folder / "env.py", "textworld_limits_env")
    assert env.MAX_NEW_TOKENS == get_task("textworld").spec.eval["max_new_tokens"]


@pytest.fixture(scope="module")
def deepsearchqa(tmp_path_factory):
    return ensure_prepared(
        get_task("deepsearchqa"),
        tmp_path_factory.mktemp("data"),
        source=Path(__file__).parent / "fixtures" / "deepsearchqa",
    )


@pytest.mark.parametrize("protocol", ["paper", "a2rl"])
def test_deepsearchqa_route_prompts_are_what_the_grader_sends(protocol, deepsearchqa, tok, tmp_path):
    """Thought-less expert steps: "Thought:\\nAction: Search[...]" (a2rl), "Thought: Action: search[...]" (paper)."""
    from test_judge import completion, stub_llm

    task, data = get_task("deepsearchqa"), deepsearchqa
    traj = read_jsonl(data.train_dir / "trajectories.jsonl")[0]
    graded = tmp_path / "graded"  # the training question, graded as if held out
    graded.mkdir()
    write_jsonl(graded / "test.jsonl", [read_jsonl(data.train_dir / "train.jsonl")[int(traj["episode"])]])
    with stub_llm(lambda body, headers: (200, completion("correct"))) as (url, _):
        sft, grpo, sent, result = route_and_grader(
            "deepsearchqa",
            data.train_dir,
            graded,
            traj,
            protocol,
            tok,
            BIG,
            search={**task.spec.eval["search"], "corpus": str(data.train_dir / "corpus.sqlite")},
            judge={"base_url": url, "model": "stub-judge", "retries": 0},
        )
    assert sent == sft == grpo and len(sft) == len(traj["actions"]) and result["correct"] == 1
    step = {"paper": "\n\nThought: Action: search[", "a2rl": "Thought:\nAction: Search["}[protocol]
    assert step in sft[1] and "Observation: " in sft[1]


def test_deepsearchqa_token_limits_are_the_graders():
    env = load_evaluator(get_task("deepsearchqa")).dsqa
    assert env.MAX_NEW_TOKENS["a2rl"] == get_task("deepsearchqa").spec.eval["max_new_tokens"]


def test_a_model_whose_context_no_expert_step_fits_stops_with_a_clear_error(alfworld, tiny_model, tmp_path, capsys):
    """paper's ALFWorld prompts (two full examples) outgrow the tiny model's 512 tokens: the grader would end every
    episode before its first action, so there is nothing to imitate."""
    from types import SimpleNamespace

    from a2rl.reference import interactive

    train, _ = alfworld
    args = SimpleNamespace(protocol="paper", sft_steps=1, grpo_steps=1, template_kwargs={})
    assert interactive.run(args, tiny_model, train, tmp_path / "out") == 2
    assert (
        "error: no expert step fits the model's context in protocol paper's prompts (512 tokens)"
        in capsys.readouterr().out
    )
