"""Score alpacaeval: the length-controlled (LC) win rate against the AlpacaEval 2.0 baseline answers (GPT-4 Turbo),
under one of two protocols. Both answer each prompt the same way (generate_answers: chat template, greedy).

`paper` is AlpacaEval 2.0 as the reference runs it (alpaca_eval's `weighted_alpaca_eval_gpt4_turbo` annotator and
`length_controlled_v1` GLM):
- Judge. One request per prompt with alpaca_eval's ranking prompt (alpaca_eval_clf.txt, checked in as data: see
  its licence note in description.md), the baseline as output_1 ("m") and the policy as output_2 ("M"), the two
  swapped where alpaca_eval's seeded coin (`is_switched_outputs` + instruction + "0") says so; placeholders are
  filled one after another, first occurrence each, as alpaca_eval does. At most 1 token, top 5 logprobs;
  preference = 2 − P(m)/(P(m)+P(M)) from the first token's top logprobs (1 = baseline better, 2 = policy),
  mirrored back after a swap; neither token among them: no preference (NaN upstream). Fallback, where the endpoint
  returns no logprobs at all (upstream would fail): the identifier it wrote, "m" → 1, "M" → 2. Identical outputs
  are a draw (1.5) without asking. Upstream samples at temperature 1 (which does not change logprobs); our client
  sends 0.
- LC. A logistic regression of P(policy better) on tanh(Δ_i/sd(Δ)) (Δ = baseline length − policy length, in
  characters), the instruction's difficulty and a not-gamed-baseline indicator, no intercept, fitted together
  with the annotations of two length-gamed copies of the baseline (`df_gamed.csv` from tatsu-lab/alpaca_eval, which
  prepare puts in the held-out folder; weight 0.2/2 each) by scikit-learn's LogisticRegressionCV (L1, liblinear,
  5 GroupKFold folds over the soft-label log loss, random_state 123), as alpaca_eval fits it. The difficulty of
  instruction i is that of the first row with index i in df_gamed.csv. LC = 100 · mean_i P̂(policy better on i)
  at Δ = 0, over every instruction (those without a preference included, as upstream). Raw win rate = 100 ·
  mean(preference − 1) over the preferences given.

`a2rl` is our own protocol, kept as it was: our A/B prompt (a2rl/tasklib/pairwise.py), each prompt judged twice,
once in each position, P from "A"/"B" logprobs; LC from the same GLM without the instruction-difficulty term and
without the gamed-baseline rows, fitted by Newton's method with a weak ridge (λ = `RIDGE`) instead of the CV'd L1,
so LC = 100 · σ(θ_0).
"""

from __future__ import annotations

import json
import math
import random
import statistics
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from a2rl.llm.chat import Messages
from a2rl.llm.judge import ChatClient, Completion, EngineJudge, JudgeError, judge_client
from a2rl.tasklib.pairwise import compare_to_references, generate_answers, win_rate_summary

RIDGE = 0.01
LC_METHOD = {
    "paper": "alpaca_eval glm length_controlled_v1 (instruction difficulty, gamed-baseline rows, CV'd L1)",
    "a2rl": f"glm length_controlled_v1 without the instruction-difficulty term; ridge {RIDGE} instead of CV'd L1",
}

PAPER_TEMPLATE = Path(__file__).with_name("alpaca_eval_clf.txt")  # alpaca_eval's alpaca_eval_clf_gpt4_turbo prompt
GAMED_CSV = "df_gamed.csv"  # under heldout/, from tatsu-lab/alpaca_eval (prepare.py)
GAMED_COLUMNS = ("index", "preference", "std_delta_len", "instruction_difficulty", "not_gamed_baseline")
# The seed of alpaca_eval's order coin, which decides the order the judge sees: the annotator's, which its
# processors inherit. alpaca_eval.evaluate (as the reference calls it) builds PairwiseAnnotator with its default
# seed 0; the 123 in SingleAnnotator's and the processors' signatures is overridden by it.
PAPER_SEED = "0"
PAPER_TOP_LOGPROBS = 5
PAPER_IDENTIFIERS = ("m", "M")  # output_1, output_2
GAMED_WEIGHT = 0.2 / 2  # regularize_to_baseline_lambda, split over the two gamed baselines
CV_FOLDS, CV_SEED = 5, 123


class MissingGamedAnnotations(JudgeError):
    """df_gamed.csv is not in the held-out folder: the data was prepared before the paper protocol needed it."""


# ---------------------------------------------------------------- paper: the annotator


def is_switched(instruction: str) -> bool:
    """Whether alpaca_eval shows the policy's answer first for this instruction (its seeded coin)."""
    return random.Random(f"is_switched_outputs{instruction}{PAPER_SEED}").choices([False, True], k=1)[0]


def paper_messages(instruction: str, output_1: str, output_2: str) -> Messages:
    """The ranking prompt as chat messages: each placeholder replaced at its first occurrence, in order, then the
    <|im_start|>role ... <|im_end|> blocks split into messages with their text stripped."""
    prompt = PAPER_TEMPLATE.read_text(encoding="utf-8")
    for key, value in (("instruction", instruction), ("output_1", output_1), ("output_2", output_2)):
        prompt = prompt.replace("{" + key + "}", value, 1)
    messages = []
    for block in prompt.strip().split("<|im_start|>")[1:]:
        role, _, content = block.partition("\n")
        messages.append({"role": role.strip(), "content": content.split("<|im_end|>", 1)[0].strip()})
    return messages


def paper_preference(c: Completion) -> float | None:
    """1 (output_1 better) … 2 (output_2 better) from the first token's top logprobs; the written identifier when
    the endpoint returned no logprobs; None when neither identifier is there."""
    if c.first_token_logprobs:
        logprobs = {t: lp for t, lp in c.first_token_logprobs if t in PAPER_IDENTIFIERS}  # the last of a repeat
        if not logprobs:
            return None
        first = logprobs.get("m", -math.inf)
        return 2 - math.exp(first - np.logaddexp(first, logprobs.get("M", -math.inf)))
    return {"m": 1.0, "M": 2.0}.get(c.text)


def paper_preferences(
    instructions: Sequence[str], baseline: Sequence[str], answers: Sequence[str], client: ChatClient | EngineJudge
) -> list[float | None]:
    """The preference of each answer over the baseline's, 1 … 2 (2 = the policy's better), None without one."""
    asked = [i for i, (b, a) in enumerate(zip(baseline, answers, strict=True)) if a != b]
    switched = {i: is_switched(instructions[i]) for i in asked}
    conversations = [
        paper_messages(instructions[i], *((answers[i], baseline[i]) if switched[i] else (baseline[i], answers[i])))
        for i in asked
    ]
    verdicts = client.chat_many(conversations, max_tokens=1, top_logprobs=PAPER_TOP_LOGPROBS)
    preferences: list[float | None] = [1.5] * len(answers)  # identical outputs: a draw, the judge not asked
    for i, verdict in zip(asked, verdicts):
        p = paper_preference(verdict)
        preferences[i] = None if p is None else (3 - p if switched[i] else p)
    return preferences


# ---------------------------------------------------------------- paper: the GLM


def read_gamed(heldout_dir: Path):
    import pandas as pd

    path = Path(heldout_dir) / GAMED_CSV
    if not path.is_file():
        raise MissingGamedAnnotations(
            f"{path} is missing: the paper protocol's LC needs alpaca_eval's df_gamed.csv; prepare alpacaeval again "
            "(a2rl prepare alpacaeval, or --source with df_gamed.csv beside the other files)"
        )
    gamed = pd.read_csv(path)
    if missing := set(GAMED_COLUMNS) - set(gamed.columns):
        raise MissingGamedAnnotations(f"{path} lacks the columns {sorted(missing)}")
    return gamed


def _soft_log_loss(y, y_pred, true_prob, true_sample_weight=None) -> float:
    """Mean (weighted) cross-entropy of the predicted P(class 1) against the soft label, on the duplicated rows."""
    target = np.where(y == 1, true_prob, 1 - true_prob)
    q = np.clip(y_pred, 1e-15, 1 - 1e-15)
    loss = target * np.log(q) + (1 - target) * np.log(1 - q)
    return -np.mean(loss if true_sample_weight is None else loss * true_sample_weight)


def fit_soft_l1_cv(x: np.ndarray, p: np.ndarray, weight: np.ndarray):
    """L1 logistic regression on soft labels p ∈ [0, 1], its strength chosen by 5-fold CV over whole rows: each row
    appears twice, as class 1 weighted p·w and as class 0 weighted (1 − p)·w (scikit-learn takes hard labels)."""
    import sklearn
    from sklearn.linear_model import LogisticRegressionCV
    from sklearn.metrics import make_scorer
    from sklearn.model_selection import GroupKFold

    n = len(p)
    xx, y = np.vstack([x, x]), np.concatenate([np.ones(n), np.zeros(n)])
    true_prob, true_weight = np.concatenate([p, 1 - p]), np.concatenate([weight, weight])
    with sklearn.config_context(enable_metadata_routing=True):  # to hand the soft labels to the CV scorer
        scorer = make_scorer(
            _soft_log_loss, response_method="predict_proba", greater_is_better=False
        ).set_score_request(true_prob=True, true_sample_weight=True)
        model = LogisticRegressionCV(
            cv=GroupKFold(n_splits=CV_FOLDS),
            scoring=scorer,
            l1_ratios=(1,),
            solver="liblinear",
            fit_intercept=False,
            random_state=CV_SEED,
            use_legacy_attributes=False,
        )
        model.set_fit_request(sample_weight=True)
        model.fit(
            xx,
            y,
            sample_weight=true_prob * true_weight,
            groups=np.concatenate([np.arange(n)] * 2),
            true_prob=true_prob,
            true_sample_weight=true_weight,
        )
    return model


def paper_length_controlled_winrate(
    preferences: Sequence[float | None], lengths: Sequence[int], baseline_lengths: Sequence[int], gamed
) -> tuple[float, dict[str, float]]:
    """(LC win rate in percent, the fitted weights) for preferences 1 … 2 (None: none given; 0: a draw, as
    alpaca_eval reads it) on instructions 0 … n−1; `gamed` is df_gamed.csv as a DataFrame."""
    p = np.array([np.nan if v is None else v for v in preferences], dtype=float)
    p = np.where(p == 0, 1.5, p) - 1
    delta = np.asarray(baseline_lengths, dtype=float) - np.asarray(lengths, dtype=float)
    difficulty_of = gamed.drop_duplicates("index").set_index("index")["instruction_difficulty"]
    if missing := set(range(len(p))) - set(difficulty_of.index):
        raise MissingGamedAnnotations(f"{GAMED_CSV} has no difficulty for instructions {sorted(missing)[:5]}…")
    difficulty = difficulty_of.loc[np.arange(len(p))].to_numpy(dtype=float)
    ones = np.ones(len(p))
    x_model = np.column_stack([np.tanh(delta / np.std(delta, ddof=1)), difficulty, ones])
    not_gamed = gamed["not_gamed_baseline"].to_numpy(dtype=float)
    x_gamed = np.column_stack(
        [
            np.tanh(gamed["std_delta_len"].to_numpy(dtype=float)),
            gamed["instruction_difficulty"].to_numpy(dtype=float),
            not_gamed,
        ]
    )
    x = np.vstack([x_gamed, x_model])
    y = np.concatenate([gamed["preference"].to_numpy(dtype=float), p])
    weight = np.concatenate([not_gamed + GAMED_WEIGHT * (1 - not_gamed), ones])
    given = ~np.isnan(y)
    model = fit_soft_l1_cv(x[given], y[given], weight[given])
    predicted = model.predict_proba(np.column_stack([np.zeros(len(p)), difficulty, ones]))[:, 1]
    weights = dict(zip(("length", "instruction_difficulty", "not_gamed_baseline"), map(float, model.coef_[0])))
    return 100 * float(predicted.mean()), weights


def _sigmoid(z: np.ndarray | float) -> np.ndarray | float:
    return 0.5 * (1.0 + np.tanh(0.5 * np.asarray(z)))  # overflow-free logistic


def fit_logistic(x: np.ndarray, p: np.ndarray, ridge: float = RIDGE, iterations: int = 100) -> np.ndarray:
    """argmin_θ Σ_i CE(p_i, σ(x_i·θ)) + ridge/2 · |θ|², soft labels p_i ∈ [0, 1]; strictly convex, so Newton's
    method from θ = 0 converges."""
    theta = np.zeros(x.shape[1])
    for _ in range(iterations):
        mu = _sigmoid(x @ theta)
        gradient = x.T @ (mu - p) + ridge * theta
        hessian = (x.T * (mu * (1 - mu))) @ x + ridge * np.eye(x.shape[1])
        step = np.linalg.solve(hessian, gradient)
        theta -= step
        if np.abs(step).max() < 1e-10:
            return theta
    raise ArithmeticError(f"the LC logistic fit did not converge in {iterations} Newton steps")


def length_controlled_winrate(
    preferences: Sequence[float], lengths: Sequence[int], baseline_lengths: Sequence[int]
) -> tuple[float, dict[str, float]]:
    """(LC win rate in percent, the fitted weights) — see the module docstring."""
    p = np.asarray(preferences, dtype=float)
    delta = np.asarray(lengths, dtype=float) - np.asarray(baseline_lengths, dtype=float)
    sd = delta.std(ddof=1) if len(delta) > 1 else 0.0
    length_term = np.tanh(delta / sd) if sd > 0 else np.zeros_like(delta)
    theta = fit_logistic(np.column_stack([np.ones_like(p), length_term]), p)
    return 100 * float(_sigmoid(theta[0])), {"intercept": float(theta[0]), "length": float(theta[1])}


def paper_summary(preferences: Sequence[float | None], answers: Sequence[str], baseline: Sequence[str]) -> dict:
    """alpaca_eval's head-to-head numbers over the preferences given (win rate and its standard error in percent)."""
    given = [p - 1 for p in preferences if p is not None]
    n = len(given)
    return {
        "win_rate": 100 * statistics.fmean(given) if n else 0.0,
        "standard_error": 100 * statistics.stdev(given) / math.sqrt(n) if n > 1 else 0.0,
        "n_total": n,
        "n_wins": sum(p > 0.5 for p in given),
        "n_draws": sum(p == 0.5 for p in given),
        "avg_length": statistics.fmean(map(len, answers)),
        "reference_avg_length": statistics.fmean(map(len, baseline)),
        "unparsed_verdicts": len(preferences) - n,
    }


def evaluate(generator, heldout_dir: Path, options: dict, *, engine=None) -> dict:
    protocol = options["protocol"]
    rows = [json.loads(line) for line in (Path(heldout_dir) / "test.jsonl").read_text().splitlines() if line]
    instructions, baseline = [r["instruction"] for r in rows], [r["output"] for r in rows]
    gamed = read_gamed(heldout_dir) if protocol == "paper" else None  # before generating: fail fast
    client = judge_client(options["judge"], engine)
    generation = {
        "max_new_tokens": int(options.get("max_new_tokens", 512)),
        "batch_size": int(options.get("batch_size", 16)),
    }
    if protocol == "paper":
        answers = generate_answers(generator, instructions, **generation)
        preferences = paper_preferences(instructions, baseline, answers, client)
        lc, weights = paper_length_controlled_winrate(
            preferences, list(map(len, answers)), list(map(len, baseline)), gamed
        )
        summary = paper_summary(preferences, answers, baseline)
    else:
        comparison = compare_to_references(generator, instructions, baseline, client, **generation)
        lc, weights = length_controlled_winrate(
            comparison.preferences, [len(a) for a in comparison.answers], [len(b) for b in baseline]
        )
        summary = win_rate_summary(comparison, baseline)
    return {
        "score": lc,
        "length_controlled_winrate": lc,
        **summary,
        "lc_method": LC_METHOD[protocol],
        "lc_weights": weights,
        "baseline_generator": sorted({r["generator"] for r in rows}),
        "judge": client.describe(),
    }
