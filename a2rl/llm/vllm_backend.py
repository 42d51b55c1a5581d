"""The vLLM backend: vLLM's offline engine (`vllm.LLM` + `SamplingParams`), tensor-parallel over the grader's GPUs.

One engine serves many submissions (llm/backends.py decides when): `load_weights` points the running engine
at another checkpoint of the same architecture, tokenizer and dtype with
`llm.collective_rpc("update_config", args=({"model_config": {"model": dir}},))` and
`llm.collective_rpc("reload_weights")` (the worker API of vLLM's example
examples/offline_inference/skip_loading_weights_in_engine_init.py), then `llm.reset_prefix_cache()`, so no KV
block computed with the old weights is reused. This module has NOT run against a real vLLM (none can be
installed where it was written); the tests drive it with a recording stand-in for `LLM` (tests/fakes.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from a2rl.llm.contextcap import ContextCap, context_length
from a2rl.llm.stops import cut_at_stop, stop_strings
from a2rl.llm.inference import tokenizer_source
from a2rl.spec.generation import GenerationPreset


def vllm_api() -> tuple[Any, Any]:
    """(LLM, SamplingParams); the one place vllm is imported, so tests can put a stand-in here."""
    from vllm import LLM, SamplingParams

    return LLM, SamplingParams


class VLLMGenerator:
    backend = "vllm"

    def __init__(self, llm: Any, sampling_params: Any, preset: GenerationPreset, config: Any,
                 context: int | None = None):
        self.llm, self._sampling_params, self.preset, self.config = llm, sampling_params, preset, config
        self.tokenizer = llm.get_tokenizer()
        self.context = context or context_length(config)  # vLLM's max_model_len (default: the model's)
        self.context_cap = ContextCap()

    @classmethod
    def load(cls, model_dir: Path, *, tokenizer_dir: Path | None = None, gpus: int = 1,
             gpu_memory_utilization: float = 0.9, max_model_len: int | None = None,
             preset: GenerationPreset | None = None) -> VLLMGenerator:
        from transformers import AutoConfig

        LLM, SamplingParams = vllm_api()
        preset = preset or GenerationPreset(name="greedy")
        llm = LLM(model=str(model_dir), tokenizer=str(tokenizer_source(model_dir, tokenizer_dir)),
                  tensor_parallel_size=max(1, gpus), gpu_memory_utilization=gpu_memory_utilization,
                  max_model_len=max_model_len, dtype="bfloat16", trust_remote_code=False, seed=preset.seed,
                  load_format="safetensors")  # never unpickle a submitted pytorch_model.bin
        config = AutoConfig.from_pretrained(model_dir, trust_remote_code=False, local_files_only=True)
        return cls(llm, SamplingParams, preset, config, max_model_len)

    def load_weights(self, model_dir: Path) -> None:
        self.llm.collective_rpc("update_config", args=({"model_config": {"model": str(model_dir)}},))
        self.llm.collective_rpc("reload_weights")
        self.llm.reset_prefix_cache()

    def generate(self, prompts: list[str], *, max_new_tokens: int, batch_size: int = 64,
                 stop: str | Sequence[str] | None = "\n", add_special_tokens: bool = True) -> list[str]:
        """The engine schedules its own batches (batch_size is the transformers backend's knob). A prompt rendered
        by a chat template holds its special tokens already: with add_special_tokens=False it goes in as token ids
        (vLLM's TokensPrompt), since vLLM would add a BOS to text. vLLM ends each request at max_model_len; what
        that cap did is counted (ContextCap) and a prompt with no room left gets "" (vLLM would refuse it)."""
        stops = stop_strings(stop)
        p = self.preset
        sampling = dict(temperature=p.temperature, top_p=p.top_p, top_k=p.top_k or -1, seed=p.seed) \
            if not p.greedy else dict(temperature=0.0)
        params = self._sampling_params(max_tokens=max_new_tokens, stop=list(stops), **sampling)
        lengths = [len(self.tokenizer(x, add_special_tokens=add_special_tokens)["input_ids"]) for x in prompts]
        limits = self.context_cap.limits(lengths, max_new_tokens, self.context)
        room = [i for i, limit in enumerate(limits) if limit > 0]
        outputs = self.llm.generate(self._inputs([prompts[i] for i in room], add_special_tokens), params,
                                    use_tqdm=False) if room else []
        self.context_cap.filled += sum(limits[i] < max_new_tokens and o.outputs[0].finish_reason == "length"
                                       for i, o in zip(room, outputs))
        texts = [""] * len(prompts)
        for i, o in zip(room, outputs):
            texts[i] = cut_at_stop(o.outputs[0].text, stops)
        return texts

    def first_token_logprobs(self, prompts: list[str], *, top: int, batch_size: int = 16,
                             add_special_tokens: bool = True) -> list[list[tuple[str, float]]]:
        """The `top` likeliest next tokens of each prompt with their log-probabilities, best first: one greedy
        token with `logprobs=top` (vLLM returns the sampled token too, so there may be top + 1)."""
        params = self._sampling_params(max_tokens=1, temperature=0.0, logprobs=top)
        outputs = self.llm.generate(self._inputs(prompts, add_special_tokens), params, use_tqdm=False)
        return [sorted(((lp.decoded_token, lp.logprob) for lp in o.outputs[0].logprobs[0].values()),
                       key=lambda t: -t[1])[:top] for o in outputs]

    def _inputs(self, prompts: list[str], add_special_tokens: bool) -> list:
        """Text, or token ids (vLLM's TokensPrompt) where special tokens must not be added."""
        return prompts if add_special_tokens else \
            [{"prompt_token_ids": self.tokenizer(p, add_special_tokens=False)["input_ids"]} for p in prompts]
