"""Greedy batched generation for the grader (transformers backend; runs on CPU).

Submitted checkpoints are untrusted: weights load from safetensors only and no repository code
is executed. Thread count comes from the environment (OMP_NUM_THREADS), set by the caller.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    StoppingCriteria,
    StoppingCriteriaList,
)

from a2rl.tasklib.answers import cut_at_stop, stop_strings  # noqa: F401 (cut_at_stop: drivers use it from here)

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


class StopOnString(StoppingCriteria):
    """Marks a sequence done once its generated text contains any of the stop strings.

    Only the last few tokens are decoded per step: every token carries at least one byte, so an
    occurrence that ends in the newest token lies within the last len(longest stop in bytes) tokens.
    transformers' own `stop_strings` is not used: it also matches a stop string that begins in the prompt.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, stop: str | Sequence[str], prompt_len: int):
        self.tokenizer = tokenizer
        self.stops = stop_strings(stop)
        self.prompt_len = prompt_len
        self.window = max(len(s.encode()) for s in self.stops)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs) -> torch.BoolTensor:
        start = max(self.prompt_len, input_ids.shape[1] - self.window)
        tails = self.tokenizer.batch_decode(input_ids[:, start:], skip_special_tokens=True)
        return torch.tensor([any(s in t for s in self.stops) for t in tails], dtype=torch.bool,
                            device=input_ids.device)


class Generator:
    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase):
        self.model = model
        self.tokenizer = tokenizer

    @classmethod
    def load(cls, model_dir: Path, *, tokenizer_dir: Path | None = None, device: str = "cpu") -> Generator:
        model_dir = Path(model_dir)
        has_tokenizer = any((model_dir / f).exists() for f in TOKENIZER_FILES)
        tok_dir = model_dir if has_tokenizer or tokenizer_dir is None else Path(tokenizer_dir)
        tokenizer = AutoTokenizer.from_pretrained(
            tok_dir, padding_side="left", trust_remote_code=False, local_files_only=True
        )
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        model = AutoModelForCausalLM.from_pretrained(
            model_dir,
            use_safetensors=True,  # never unpickle a submitted pytorch_model.bin
            trust_remote_code=False,
            local_files_only=True,
            dtype=torch.float32 if device == "cpu" else "auto",
        ).to(device)
        model.eval()
        return cls(model, tokenizer)

    def generate(
        self, prompts: list[str], *, max_new_tokens: int, batch_size: int = 64,
        stop: str | Sequence[str] | None = "\n", add_special_tokens: bool = True,
    ) -> list[str]:
        """Greedy completions, each cut at the earliest of the stop strings; a batch stops decoding once every
        sequence in it has produced one (or EOS). A prompt rendered by a chat template already holds its special
        tokens: pass add_special_tokens=False, or a BOS is doubled."""
        stops = stop_strings(stop)
        # A fresh config, so sampling settings shipped with a submission cannot change grading.
        config = GenerationConfig(
            max_new_tokens=max_new_tokens,
            do_sample=False,
            use_cache=True,  # trainers save use_cache=false in config.json; without the KV cache decoding is slow
            eos_token_id=self.tokenizer.eos_token_id,
            pad_token_id=self.tokenizer.pad_token_id,
        )
        # Batching similar lengths together wastes less compute on padding.
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        outputs: list[str] = [""] * len(prompts)
        for lo in range(0, len(order), batch_size):
            idx = order[lo : lo + batch_size]
            for i, text in zip(idx, self._generate_batch([prompts[i] for i in idx], config, stops,
                                                         add_special_tokens)):
                outputs[i] = text
        return outputs

    @torch.inference_mode()
    def _generate_batch(self, prompts: list[str], config: GenerationConfig, stops: tuple[str, ...],
                        add_special_tokens: bool) -> list[str]:
        enc = self.tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=add_special_tokens)
        enc = enc.to(self.model.device)
        prompt_len = enc["input_ids"].shape[1]
        criteria = StoppingCriteriaList([StopOnString(self.tokenizer, stops, prompt_len)] if stops else [])
        out = self.model.generate(**enc, generation_config=config, stopping_criteria=criteria)
        texts = self.tokenizer.batch_decode(out[:, prompt_len:], skip_special_tokens=True)
        return [cut_at_stop(t, stops) for t in texts]
