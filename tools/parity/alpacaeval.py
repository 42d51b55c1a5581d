"""Made-up inputs of alpacaeval's parity test (tests/test_parity_alpacaeval.py), which runs alpaca_eval 0.6.6
itself at test time (the `parity` extra) on them; this script needs numpy and pandas only.

The published per-model annotations and the real `df_gamed.csv` are on the Hugging Face Hub, which is not
reachable here, so the inputs are made up (a fixed seed) and checked in:
- tests/fixtures/parity/alpacaeval_df_gamed.csv: annotations of two length-gamed copies of the baseline, in the
  columns alpaca_eval's GLM reads (model, index, preference, std_delta_len, instruction_difficulty,
  not_gamed_baseline), with a made-up difficulty per instruction;
- tests/fixtures/parity/alpacaeval.json "models": per made-up model, the judge's opinion of its output on each
  instruction (P(model's better), 1..2 as a preference; null: the judge names neither output; 0: its output is the
  baseline's, a draw) and the lengths of its and the baseline's outputs;
- "judge_cases": judge replies (first-token top logprobs) that the annotator must read as upstream does.

Run: python tools/parity/alpacaeval.py
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from common import FIXTURES, write_fixture

N = 60  # instructions
GAMED_CSV = FIXTURES / "alpacaeval_df_gamed.csv"


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


def main() -> None:
    rng = np.random.default_rng(20240101)
    made_up_gamed(rng).to_csv(GAMED_CSV, index=False)
    models = made_up_models(rng)
    write_fixture(
        "alpacaeval",
        {
            "gamed_csv": GAMED_CSV.name,
            "models": models,
            "judge_cases": [
                {"instruction": i, "baseline": b, "output": o, "top_logprobs": top, "text": text}
                for i, b, o, top, text in JUDGE_CASES
            ],
        },
    )


if __name__ == "__main__":
    main()
