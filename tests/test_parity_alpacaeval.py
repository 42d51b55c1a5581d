"""alpacaeval's `paper` protocol against alpaca_eval 0.6.6 itself, run here at test time (the `parity` extra):
`alpaca_eval.evaluate` as the reference calls it (weighted_alpaca_eval_gpt4_turbo annotator; the other arguments at
their defaults but those that write files or read a cached leaderboard), its judge call the only thing replaced. Both
sides get the same judge, a function of the prompt it is shown: upstream through alpaca_eval's completion-function hook,
a2rl through a real HTTP server. Upstream's order coin, prompt, logprob parser, LC GLM and win rate run; the prompts
each side's judge saw, the preferences, the LC and raw win rates must agree.

Inputs (tools/parity/alpacaeval.py): made-up models (the published annotations and the real df_gamed.csv are on the
Hugging Face Hub, not reachable here; alpaca_eval's download of df_gamed.csv is pointed at a made-up copy) and a few
odd judge replies. Where `a2rl`'s own protocol differs, and why, is listed."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib.metadata import version
from pathlib import Path

import alpaca_eval
import pandas as pd
import pytest
from alpaca_eval import annotators, utils
from alpaca_eval.metrics import glm_winrate

from a2rl.spec.tasks import get_task
from a2rl.tasklib.evaluator import load_evaluator
from conftest import FIXTURES
from test_judge import completion, stub_llm

pytestmark = [
    pytest.mark.slow,  # alpaca_eval's CV'd GLM, seven times on each side (~30 s)
    # upstream's LogisticRegressionCV call, written for an older scikit-learn
    pytest.mark.filterwarnings("ignore:The default value for l1_ratios:FutureWarning"),
    pytest.mark.filterwarnings("ignore:'penalty' was deprecated:FutureWarning"),
    pytest.mark.filterwarnings("ignore:The fitted attributes of LogisticRegressionCV:FutureWarning"),
]

EVAL = load_evaluator(get_task("alpacaeval"))
INPUTS = json.loads((FIXTURES / "parity" / "alpacaeval.json").read_text())
GAMED_CSV = FIXTURES / "parity" / INPUTS["gamed_csv"]
MODELS = INPUTS["models"]
ANNOTATOR = "weighted_alpaca_eval_gpt4_turbo"  # alpaca_eval 2's default, which the reference's call uses
TOLERANCE = 1e-6  # percentage points
N_COINS = 400  # more instructions whose order is compared (a wrong coin seed agrees on about half)

# model → how far (points) a2rl's LC lands from alpaca_eval's, and why: a2rl drops the instruction-difficulty term
# and the gamed-baseline rows and fits a ridge instead of the CV'd L1. On the verbose models the L1/gamed-row
# regularisation pulls the length weight toward the baseline's, so LC stays higher upstream.
A2RL_DIFFERS = {
    "verbose_and_good": -5.273,
    "verbose_and_weak": -6.310,
    "concise_and_good": 1.025,
    "concise_and_weak": 1.459,
    "like_the_baseline": 0.576,
    "much_better": 0.645,
    "with_nan_and_draws": 0.402,
}

Messages = list[dict]
Judge = Callable[[Messages], tuple[str, list[tuple[str, float]]]]  # prompt → first token, its top logprobs


def shown(messages: Messages) -> tuple[str, list[str]]:
    """The instruction and the two outputs a judge prompt shows, in the order shown."""
    text = messages[-1]["content"]
    return re.search(r'"instruction": """(.*?)""",', text, re.S)[1], re.findall(r'"output": """(.*?)"""', text, re.S)


def opinion_judge(opinions: dict[str, tuple[str, float | None]]) -> Judge:
    """A judge with an opinion of each model output (instruction → (output, P(it beats the baseline)), None: it
    names neither), whichever position the output is shown in: "M" (the second shown) with P(second is better)."""

    def judge(messages: Messages) -> tuple[str, list[tuple[str, float]]]:
        instruction, outputs = shown(messages)
        output, p = opinions[instruction]
        if p is None:
            return "The", [("The", -0.1), ("Both", -2.5)]
        second = p if outputs[1] == output else 1 - p
        return ("M" if second >= 0.5 else "m"), [("M", math.log(second)), ("m", math.log1p(-second))]

    return judge


@contextmanager
def alpaca_eval_judged_by(judge: Judge) -> Iterator[list[Messages]]:
    """alpaca_eval with `judge` answering its judge calls (the annotator's completion function, openai_completions),
    and its hub download of df_gamed.csv pointed at the made-up copy; yields the prompts its judge gets."""
    asked: list[Messages] = []

    def completions(prompts: list[str], **kwargs) -> dict:  # what openai_completions returns
        replies = []
        for prompt in prompts:
            asked.append(utils.prompt_to_chatml(prompt))
            text, top = judge(asked[-1])
            top_logprobs = [{"token": t, "logprob": lp} for t, lp in top]
            replies.append(
                {"text": text, "logprobs": {"content": [{"token": text, "logprob": 0.0, "top_logprobs": top_logprobs}]}}
            )
        return {
            "completions": [r["text"] for r in replies],
            "completions_all": replies,
            "price_per_example": [0.0] * len(prompts),
            "time_per_example": [0.0] * len(prompts),
        }

    def fn_completions(name: str) -> Callable:
        assert name == "openai_completions", name  # the annotator's configured judge call, and nothing else
        return completions

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(annotators.base, "get_fn_completions", fn_completions)
        patch.setattr(glm_winrate, "hf_hub_download", lambda **kw: str(GAMED_CSV))
        yield asked


def upstream_evaluate(
    instructions: list[str], baseline: list[str], outputs: list[str], judge: Judge
) -> tuple[dict, list[dict], list[Messages]]:
    """alpaca_eval.evaluate(model_outputs, reference_outputs, annotators_config=ANNOTATOR) judged by `judge`, writing
    nothing (no annotation cache, no saved GLM weights): (the model's leaderboard row, its annotations, the prompts
    its judge got)."""
    with alpaca_eval_judged_by(judge) as asked:
        board, annotations = alpaca_eval.evaluate(
            model_outputs=[
                {"instruction": i, "output": o, "generator": "made_up"} for i, o in zip(instructions, outputs)
            ],
            reference_outputs=[
                {"instruction": i, "output": b, "generator": "gpt4_1106_preview"}
                for i, b in zip(instructions, baseline)
            ],
            annotators_config=ANNOTATOR,
            name="made_up",
            output_path=None,
            precomputed_leaderboard=None,
            is_return_instead_of_print=True,
            metric_kwargs={"save_weights_dir": None},
            caching_path=None,
        )
    return board.loc["made_up"].to_dict(), annotations, asked


def a2rl_paper(
    instructions: list[str], baseline: list[str], outputs: list[str], judge: Judge
) -> tuple[list[float | None], list[Messages]]:
    """paper_preferences with its judge a real HTTP server answering as `judge`: (preferences, prompts it got)."""

    def reply(body: dict, headers: dict) -> tuple[int, dict]:
        text, top = judge(body["messages"])
        return 200, completion(text, top=top)

    with stub_llm(reply) as (url, seen):
        preferences = EVAL.paper_preferences(instructions, baseline, outputs, EVAL.ChatClient(url, "judge", retries=0))
    return preferences, [s["body"]["messages"] for s in seen]


def model_run(name: str) -> dict:
    """A made-up model's outputs ("o" × its length; the baseline's own output where its preference is 0, a draw)
    and the judge's opinion of them."""
    model = MODELS[name]
    instructions = [f"instruction {i}" for i in range(len(model["lengths"]))]
    baseline = ["b" * n for n in model["baseline_lengths"]]
    outputs = [b if p == 0 else "o" * n for b, p, n in zip(baseline, model["preference"], model["lengths"])]
    opinions = {
        i: (o, None if p in (None, 0) else p - 1) for i, o, p in zip(instructions, outputs, model["preference"])
    }
    return {"instructions": instructions, "baseline": baseline, "outputs": outputs, "judge": opinion_judge(opinions)}


def same_preferences(a2rl: list[float | None], annotations: list[dict]) -> bool:
    """a2rl's preferences are upstream's annotations' (None where upstream has none: None or NaN)."""
    upstream = [a["preference"] for a in annotations]
    upstream = [None if p is None or math.isnan(p) else pytest.approx(p, abs=1e-12) for p in upstream]
    return a2rl == upstream


def key(messages: Messages) -> tuple:
    return tuple((m["role"], m["content"]) for m in messages)


@pytest.fixture(scope="module")
def runs() -> dict[str, dict]:
    """Each made-up model through alpaca_eval.evaluate and through a2rl's paper annotator."""
    out = {}
    for name in MODELS:
        run = model_run(name)
        args = (run["instructions"], run["baseline"], run["outputs"], run["judge"])
        run["upstream"], run["annotations"], run["upstream_asked"] = upstream_evaluate(*args)
        run["preferences"], run["a2rl_asked"] = a2rl_paper(*args)
        out[name] = run
    return out


def test_upstream_is_alpaca_eval_0_6_6_with_our_prompt() -> None:
    assert version("alpaca_eval") == "0.6.6"
    package = Path(alpaca_eval.__file__).parent / "evaluators_configs"
    assert (
        package / "alpaca_eval_clf_gpt4_turbo" / "alpaca_eval_clf.txt"
    ).read_text() == EVAL.PAPER_TEMPLATE.read_text()


@pytest.mark.parametrize("name", MODELS)
def test_paper_agrees_with_alpaca_eval_evaluate(runs: dict, name: str) -> None:
    """Same prompts to the judge (so the same order coin), same preferences, LC and raw win rate."""
    run = runs[name]
    assert sorted(map(key, run["a2rl_asked"])) == sorted(map(key, run["upstream_asked"]))
    assert same_preferences(run["preferences"], run["annotations"])
    lc, _ = EVAL.paper_length_controlled_winrate(
        run["preferences"], list(map(len, run["outputs"])), list(map(len, run["baseline"])), pd.read_csv(GAMED_CSV)
    )
    upstream = run["upstream"]
    assert lc == pytest.approx(upstream["length_controlled_winrate"], abs=TOLERANCE)
    summary = EVAL.paper_summary(run["preferences"], run["outputs"], run["baseline"])
    assert summary["win_rate"] == pytest.approx(upstream["win_rate"], abs=TOLERANCE)
    assert (summary["n_wins"], summary["n_draws"]) == (upstream["n_wins"], upstream["n_draws"])


@pytest.mark.parametrize("name", MODELS)
def test_a2rl_lc_differs_as_listed(runs: dict, name: str) -> None:
    run = runs[name]
    soft = [0.5 if p is None else p - 1 for p in run["preferences"]]
    lc, _ = EVAL.length_controlled_winrate(soft, list(map(len, run["outputs"])), list(map(len, run["baseline"])))
    assert lc - run["upstream"]["length_controlled_winrate"] == pytest.approx(A2RL_DIFFERS[name], abs=1e-3)


def test_paper_annotator_agrees_with_alpaca_eval_on_odd_replies_and_400_coins() -> None:
    """alpaca_eval's annotator (built as evaluate builds it) and paper_preferences on the judge cases (placeholders
    in the outputs, identical outputs, replies naming neither output, repeated tokens), each answered with its
    fixed logprobs whatever the order, and on N_COINS more instructions: the same prompts, so the same order coin
    on every one, and the same preferences."""
    cases = INPUTS["judge_cases"]
    fixed = {c["instruction"].split("{")[0]: c for c in cases}

    coins = [f"made-up instruction {i}: {'why ' * (i % 5)}{i * 7919 % 1000}" for i in range(N_COINS)]
    opinion = opinion_judge({i: (f"answer to {i}", 0.25 + 0.5 * (n % 2)) for n, i in enumerate(coins)})

    def judge(messages: Messages) -> tuple[str, list[tuple[str, float]]]:
        hits = [c for k, c in fixed.items() if k in messages[-1]["content"]]
        if not hits:
            return opinion(messages)
        assert len(hits) == 1, hits
        return hits[0]["text"], [tuple(t) for t in hits[0]["top_logprobs"]]

    instructions = [c["instruction"] for c in cases] + coins
    baseline = [c["baseline"] for c in cases] + [f"baseline for {i}" for i in coins]
    outputs = [c["output"] for c in cases] + [f"answer to {i}" for i in coins]

    with alpaca_eval_judged_by(judge) as upstream_asked:  # built as alpaca_eval.evaluate builds it
        annotated = annotators.PairwiseAnnotator(annotators_config=ANNOTATOR, caching_path=None).annotate_head2head(
            outputs_1=[{"instruction": i, "output": b} for i, b in zip(instructions, baseline)],
            outputs_2=[{"instruction": i, "output": o} for i, o in zip(instructions, outputs)],
        )
    preferences, a2rl_asked = a2rl_paper(instructions, baseline, outputs, judge)
    assert len(a2rl_asked) == len(instructions) - sum(b == o for b, o in zip(baseline, outputs))
    assert sorted(map(key, a2rl_asked)) == sorted(map(key, upstream_asked))
    switched = [shown(m)[1][0] == f"answer to {shown(m)[0]}" for m in upstream_asked if shown(m)[0] in coins]
    assert len(switched) == N_COINS and 0.4 < sum(switched) / N_COINS < 0.6  # both orders, about half each
    assert same_preferences(preferences, annotated)
