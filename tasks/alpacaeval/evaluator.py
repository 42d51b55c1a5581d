"""Score alpacaeval: the length-controlled (LC) win rate against the AlpacaEval 2.0 baseline answers.

Preferences. For each prompt the judge (options["judge"], any OpenAI-compatible endpoint) compares the policy's
answer with the baseline's twice, once in each position; p_i = P(policy's answer is better), averaged over the
two orders. P comes from the judge's first-token logprobs for "A"/"B" where the endpoint returns them (as
AlpacaEval 2.0's weighted GPT-4 Turbo annotator does), else from the letter it wrote (unreadable: a tie).
Raw win rate = 100 · mean(p_i).

LC win rate (Dubois et al. 2024, alpaca_eval `metrics/glm_winrate.py`, GLM "length_controlled_v1").
Upstream fits, per model, a logistic regression of the soft preference p_i on three terms,
    logit P(policy wins on i) = θ_len · tanh(Δ_i / sd(Δ)) + θ_diff · difficulty_i + θ_0,
where Δ_i is the length difference in characters between the two answers, difficulty_i a per-instruction
difficulty estimated once from the annotations of the whole leaderboard (downloaded, `instruction_difficulty.csv`),
fitted with an L1 penalty chosen by 5-fold cross-validation and regularised toward the baseline's own weights
through annotations of length-gamed copies of the baseline (`df_gamed.csv`, weight 0.2). The LC win rate is the
prediction with the length term zeroed, averaged over instructions: 100 · mean_i σ(θ_diff · difficulty_i + θ_0).

Here, named `LC_METHOD` in the returned details, the same GLM without the instruction term:
    logit P(policy wins on i) = θ_len · tanh(Δ_i / sd(Δ)) + θ_0,    Δ_i = len(policy_i) − len(baseline_i),
fitted by Newton's method on the soft-label cross-entropy with a weak ridge penalty (λ = `RIDGE`) on
(θ_0, θ_len) instead of the CV'd L1 and the gamed-baseline rows; the ridge only keeps the fit finite when one
side wins every comparison. So LC = 100 · σ(θ_0). The difficulty scores and gamed annotations are fitted upstream on hundreds
of leaderboard models we cannot reproduce offline; without them the instruction term averages out of the win rate
except through the curvature of σ, and the length correction — the point of LC — is kept as upstream does it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from a2rl.grading.judge import ChatClient, compare_to_references, win_rate_summary

RIDGE = 0.01
LC_METHOD = f"glm length_controlled_v1 without the instruction-difficulty term; ridge {RIDGE} instead of CV'd L1"


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


def length_controlled_winrate(preferences: Sequence[float], lengths: Sequence[int],
                              baseline_lengths: Sequence[int]) -> tuple[float, dict[str, float]]:
    """(LC win rate in percent, the fitted weights) — see the module docstring."""
    p = np.asarray(preferences, dtype=float)
    delta = np.asarray(lengths, dtype=float) - np.asarray(baseline_lengths, dtype=float)
    sd = delta.std(ddof=1) if len(delta) > 1 else 0.0
    length_term = np.tanh(delta / sd) if sd > 0 else np.zeros_like(delta)
    theta = fit_logistic(np.column_stack([np.ones_like(p), length_term]), p)
    return 100 * float(_sigmoid(theta[0])), {"intercept": float(theta[0]), "length": float(theta[1])}


def evaluate(generator, heldout_dir: Path, options: dict) -> dict:
    rows = [json.loads(line) for line in (Path(heldout_dir) / "test.jsonl").read_text().splitlines() if line]
    baseline = [r["output"] for r in rows]
    client = ChatClient.from_options(options["judge"])
    comparison = compare_to_references(
        generator, [r["instruction"] for r in rows], baseline, client,
        max_new_tokens=int(options.get("max_new_tokens", 512)), batch_size=int(options.get("batch_size", 16)))
    lc, weights = length_controlled_winrate(comparison.preferences, [len(a) for a in comparison.answers],
                                            [len(b) for b in baseline])
    return {"score": lc, "length_controlled_winrate": lc, **win_rate_summary(comparison, baseline),
            "lc_method": LC_METHOD, "lc_weights": weights, "baseline_generator": sorted({r["generator"] for r in rows}),
            "judge": client.describe()}
