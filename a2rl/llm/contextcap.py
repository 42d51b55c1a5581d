"""New tokens never run past the model's context: each prompt gets at most context − its length new tokens, on
every backend (inference.Generator stops each sequence there; vLLM ends a request at max_model_len). A model does
not generate past its positions: it degrades, and grading crawls (the paper protocol asks HumanEval for 8,192
new tokens of a model with 512 positions). Torch-free, so the daemon records the cap without importing a backend.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


def context_length(config: Any) -> int | None:
    """The positions the model has (config.json's max_position_embeddings, GPT-2's n_positions); None: unknown."""
    n = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    return int(n) if n else None


@dataclass
class ContextCap:
    """What the cap did over one evaluation: a generator counts into its `context_cap`; evaluate_model gives each
    evaluation a fresh one and records it in the ledger entry's details (`context_cap`) when it bit."""

    context: int | None = None
    max_new_tokens: int = 0  # the most new tokens a generate call asked for
    capped: int = 0  # prompts given fewer new tokens than asked: context − prompt
    filled: int = 0  # of those, generations that ran to the end of the context (no EOS or stop string before)
    no_room: int = 0  # of those, prompts that filled the context already: nothing generated, "" returned

    def limits(self, prompt_lens: Sequence[int], max_new_tokens: int, context: int | None) -> list[int]:
        """Each prompt's new-token limit (counted here)."""
        self.max_new_tokens = max(self.max_new_tokens, max_new_tokens)
        if context is None:
            return [max_new_tokens] * len(prompt_lens)
        self.context = context
        limits = [max(0, min(max_new_tokens, context - n)) for n in prompt_lens]
        self.capped += sum(lim < max_new_tokens for lim in limits)
        self.no_room += limits.count(0)
        return limits

    def record(self) -> dict[str, int] | None:
        """What the ledger entry says; None where the cap did not bite."""
        return dict(self.__dict__) if self.capped else None
