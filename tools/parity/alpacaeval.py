"""Parity fixture for alpacaeval's `paper` protocol, from alpaca_eval's own code (pip install alpaca_eval==0.6.6
into a separate venv; see tools/parity/README.md).

The published per-model annotations and the real `df_gamed.csv` are on the Hugging Face Hub, which is not
reachable here, so the inputs are made up (a fixed seed) and checked in:
- tests/fixtures/parity/alpacaeval_df_gamed.csv: annotations of two length-gamed copies of the baseline, in the
  columns alpaca_eval's GLM reads (model, index, preference, std_delta_len, instruction_difficulty,
  not_gamed_baseline), with a made-up difficulty per instruction;
- tests/fixtures/parity/alpacaeval.json "models": per made-up model, the soft preference (1..2, NaN, 0 = draw) and
  the lengths of its and the baseline's outputs on each instruction.
For each model the script runs `alpaca_eval.metrics.glm_winrate.get_length_controlled_winrate` (its hub download
pointed at the file above) and records the LC win rate, its weights and the raw win rate. It also records, for a
few judge replies, what the weighted_alpaca_eval_gpt4_turbo annotator, built and run as alpaca_eval.evaluate runs
it (its completion function replaced), does: the order switch, the prompt as chat messages (None where it does
not ask: identical outputs), and the preference; and the order switch of more made-up instructions.

Run: /tmp/parity-venv/bin/python tools/parity/alpacaeval.py
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import math
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from common import FIXTURES, REPO, write_fixture

N = 60  # instructions
GAMED_CSV = FIXTURES / "alpacaeval_df_gamed.csv"
ANNOTATOR = "weighted_alpaca_eval_gpt4_turbo"


def made_up_gamed(rng: np.random.Generator) -> pd.DataFrame:
    """Two gamed baselines (concise / verbose copies) on the N instructions, rows in instruction order per model as
    upstream's lookup of the difficulty by row label expects."""
    difficulty = rng.normal(0, 1, N)
    rows = []
    for model, shift in (("gpt4_gamed_concise", -1.5), ("gpt4_gamed_verbose", 1.5)):
        std_delta = rng.normal(shift, 0.5, N)
        logit = -1.2 * np.tanh(std_delta) + 0.3 * difficulty  # longer (delta < 0 => output_2 longer) wins
        pref = 1 / (1 + np.exp(-logit - rng.normal(0, 0.5, N)))
        rows += [
            {
                "model": model,
                "index": i,
                "preference": round(float(pref[i]), 6),
                "std_delta_len": round(float(std_delta[i]), 6),
                "instruction_difficulty": round(float(difficulty[i]), 6),
                "not_gamed_baseline": False,
            }
            for i in range(N)
        ]
    return pd.DataFrame(rows)


def made_up_models(rng: np.random.Generator) -> dict[str, dict]:
    """Models whose judge preferences depend on length, quality and difficulty in different ways."""
    models = {}
    baseline_len = rng.integers(200, 2000, N)
    for name, quality, length_scale, length_effect in (
        ("verbose_and_good", 0.8, 2.0, 1.5),
        ("verbose_and_weak", -0.7, 2.5, 2.0),
        ("concise_and_good", 0.6, 0.4, 1.0),
        ("concise_and_weak", -1.2, 0.5, 1.0),
        ("like_the_baseline", 0.0, 1.0, 0.5),
        ("much_better", 2.5, 1.1, 0.3),
    ):
        lengths = np.maximum(1, (baseline_len * length_scale * rng.lognormal(0, 0.3, N)).astype(int))
        delta = (lengths - baseline_len) / 1000
        p = 1 / (1 + np.exp(-(quality + length_effect * np.tanh(delta) + rng.normal(0, 0.7, N))))
        models[name] = {
            "preference": [round(1 + float(x), 6) for x in p],
            "lengths": lengths.tolist(),
            "baseline_lengths": baseline_len.tolist(),
        }
    # judge failures (NaN: dropped from the fit, still predicted) and legacy draws (0 = 1.5)
    odd = {k: list(v) for k, v in models["like_the_baseline"].items()}
    odd["preference"][3] = odd["preference"][17] = None
    odd["preference"][8] = 0.0
    models["with_nan_and_draws"] = odd
    return models


def upstream_lc(model: dict) -> dict:
    from alpaca_eval.metrics import glm_winrate

    annotations = pd.DataFrame(
        {
            "instruction": [f"instruction {i}" for i in range(N)],
            "output_1": ["b" * n for n in model["baseline_lengths"]],
            "output_2": ["o" * n for n in model["lengths"]],
            "preference": [np.nan if p is None else p for p in model["preference"]],
            "generator_1": "gpt4_1106_preview",
            "generator_2": "made_up",
            "annotator": ANNOTATOR,
        }
    )
    metrics = glm_winrate.get_length_controlled_winrate(
        annotations, save_weights_dir=None, is_warn_extreme_changes=False
    )
    glm = annotations["glm_preference"]
    x = glm_winrate._get_featurized_data(annotations, glm_winrate.GLM_INFO["length_controlled_v1"]["formula"], 0.2)
    return {
        "length_controlled_winrate": float(metrics["length_controlled_winrate"]),
        "win_rate": float(metrics["win_rate"]),
        "n_wins": int(metrics["n_wins"]),
        "n_draws": int(metrics["n_draws"]),
        "glm_preference": [float(v) for v in glm],
        "design_columns": list(x[1].columns),
    }


# (instruction, baseline's output, model's output, the judge's first-token top logprobs or None, its text)
JUDGE_CASES = [
    (
        "Name three primary colours.",
        "Red, yellow and blue.",
        "Red, blue, yellow.",
        [("m", -0.2), ("M", -1.8), ("The", -9.0)],
        "m",
    ),
    ("Give a synonym for happy.", "Joyful.", "Glad, or joyful.", [("M", -0.01), ("m", -4.6)], "M"),
    ("What is 2+2?", "4", "2+2 equals 4.", [("M", -0.05), ("Model", -3.2)], "M"),
    ("Translate 'chat' from French.", "Cat.", "It means cat.", [("The", -0.1), ("Both", -2.5)], "The"),
    (
        "Write {output_1} literally.",
        "{output_1}",
        "I wrote {output_2} and {instruction}.",
        [("m", -0.7), ("M", -0.7)],
        "m",
    ),
    ("Say hi.", "Hi!", "Hi!", [("m", -0.3), ("M", -1.4)], "m"),
    ("List two prime numbers.", "2 and 3.", "3 and 5 are prime.", [("m", -1.1), ("M", -0.4), ("m", -2.0)], "M"),
    # shown to the judge in the other order (alpaca_eval's coin), as none of the above is
    ("Spell cat backwards.", "tac", "It is tac.", [("m", -0.3), ("M", -1.4)], "m"),
    ("Count to three.", "1, 2, 3", "One, two, three.", [("M", -0.2), ("m", -1.7)], "M"),
    ("Name a planet.", "Mars.", "Jupiter, the largest.", [("Both", -0.1), ("The", -2.5)], "Both"),
    ("What is 3*3?", "9", "3*3 = 9", [("m", -0.9), ("M", -0.5)], "M"),
]


N_COINS = 400  # made-up instructions whose order coin is recorded too (a wrong seed agrees on ~half of them)


def upstream_annotator() -> dict:
    """Each judge case through alpaca_eval's own annotator, built as `alpaca_eval.evaluate` (what the reference
    calls) builds it: PairwiseAnnotator(annotators_config=ANNOTATOR) with every other argument at its default, so
    the order coin's seed is whatever alpaca_eval passes down. Only the completion function is replaced: it records
    the prompt the judge would get and replies with the case's first-token logprobs. The order (switched or not) of
    every case and of N_COINS more instructions comes from the annotator's own preprocessing."""
    from alpaca_eval import annotators, utils

    package = Path(importlib.util.find_spec("alpaca_eval").origin).parent
    config = yaml.safe_load((package / "evaluators_configs" / ANNOTATOR / "configs.yaml").read_text())[ANNOTATOR]
    template = (
        (package / "evaluators_configs" / ANNOTATOR / ".." / "alpaca_eval_clf_gpt4_turbo" / "alpaca_eval_clf.txt")
        .resolve()
        .read_text()
    )
    assert config["prompt_template"] == "alpaca_eval_clf_gpt4_turbo/alpaca_eval_clf.txt", config
    assert (REPO / "tasks" / "alpacaeval" / "alpaca_eval_clf.txt").read_text() == template, (
        "tasks/alpacaeval/alpaca_eval_clf.txt differs from the installed alpaca_eval's prompt"
    )
    annotator = annotators.PairwiseAnnotator(annotators_config=ANNOTATOR, caching_path=None)  # no cache file
    single = annotator.annotators[ANNOTATOR]
    by_instruction = {c[0]: c for c in JUDGE_CASES}
    asked: dict[str, list] = {}

    def judge(prompts, **kwargs):  # stands for openai_completions: what it returns, for these prompts
        completions_all = []
        for prompt in prompts:
            instruction = next(i for i in by_instruction if f'"instruction": """{i}"""' in prompt)
            asked[instruction] = utils.prompt_to_chatml(prompt)
            _, _, _, top, text = by_instruction[instruction]
            completions_all.append(
                {
                    "logprobs": {
                        "content": [
                            {
                                "token": text,
                                "logprob": 0.0,
                                "top_logprobs": [{"token": t, "logprob": lp} for t, lp in top],
                            }
                        ]
                    },
                    "text": text,
                }
            )
        return {
            "completions": [c["text"] for c in completions_all],
            "completions_all": completions_all,
            "price_per_example": [0.0] * len(prompts),
            "time_per_example": [0.0] * len(prompts),
        }

    single.fn_completions = judge
    annotated = annotator.annotate_head2head(
        outputs_1=[{"instruction": i, "output": b} for i, b, *_ in JUDGE_CASES],
        outputs_2=[{"instruction": i, "output": o} for i, _, o, *_ in JUDGE_CASES],
    )
    preference = {a["instruction"]: a["preference"] for a in annotated}

    def switched(instructions: list[str]) -> list[bool]:
        rows = pd.DataFrame({"instruction": instructions, "output_1": "baseline", "output_2": "output"})
        for processor in single.processors:  # RandomSwitchTwoColumnsProcessor, seeded by the annotator
            rows = processor.preprocess(rows)
        return [bool(s) for s in rows["is_switched_outputs"]]

    coins = [f"made-up instruction {i}: {'why ' * (i % 5)}{i * 7919 % 1000}" for i in range(N_COINS)]
    cases = []
    for (instruction, baseline, output, top, text), is_switched in zip(
        JUDGE_CASES, switched([c[0] for c in JUDGE_CASES])
    ):
        p = preference[instruction]
        cases.append(
            {
                "instruction": instruction,
                "baseline": baseline,
                "output": output,
                "top_logprobs": top,
                "text": text,
                "switched": is_switched,
                "messages": asked.get(instruction),
                "preference": None if p is None or math.isnan(p) else float(p),
            }
        )
    return {
        "completions_kwargs": config["completions_kwargs"],
        "seed": single.seed,
        "cases": cases,
        "coins": dict(zip(coins, switched(coins))),
    }


def main() -> None:
    from alpaca_eval.metrics import glm_winrate

    rng = np.random.default_rng(20240101)
    made_up_gamed(rng).to_csv(GAMED_CSV, index=False)
    glm_winrate.hf_hub_download = lambda **kw: str(GAMED_CSV)  # the real file is on the hub; ours is made up
    models = made_up_models(rng)
    for model in models.values():
        model["upstream"] = upstream_lc(model)
    import sklearn

    write_fixture(
        "alpacaeval",
        {
            "upstream": f"alpaca_eval {importlib.metadata.version('alpaca_eval')} (scikit-learn {sklearn.__version__}): "
            "metrics/glm_winrate.py get_length_controlled_winrate (length_controlled_v1), "
            f"annotators.PairwiseAnnotator(annotators_config={ANNOTATOR!r}).annotate_head2head",
            "gamed_csv": GAMED_CSV.name,
            "models": models,
            "annotator": upstream_annotator(),
            "cases": list(models),
        },
    )


if __name__ == "__main__":
    main()
