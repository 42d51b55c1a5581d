"""Batched generation for the grader with transformers: bf16 on CUDA, fp32 on CPU (the devices of the job's
allocation: CUDA_VISIBLE_DEVICES). Greedy unless a generation preset says otherwise.

Submitted checkpoints are untrusted: weights load from safetensors only and no repository code
is executed. Thread count comes from the environment (OMP_NUM_THREADS), set by the caller.
"""

from __future__ import annotations

import copy
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

from a2rl.llm.contextcap import ContextCap, context_length
from a2rl.llm.stops import cut_at_stop, stop_strings
from a2rl.spec.generation import GenerationPreset

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
        return torch.tensor([any(s in t for s in self.stops) for t in tails], dtype=torch.bool, device=input_ids.device)


class StopAtLimit(StoppingCriteria):
    """Marks each sequence done once it has its own number of new tokens (its room left in the context)."""

    def __init__(self, limits: list[int], prompt_len: int):
        self.limits, self.prompt_len = limits, prompt_len

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs) -> torch.BoolTensor:
        return torch.tensor(self.limits, device=input_ids.device) <= input_ids.shape[1] - self.prompt_len


def pick_device(gpus: int | None = None) -> str:
    """cuda when the job was given GPUs (None: whenever CUDA is visible) and CUDA works, else cpu."""
    return "cuda" if (gpus is None or gpus > 0) and torch.cuda.is_available() else "cpu"


class Generator:
    """The transformers backend. On CUDA, without an explicit batch size, each batch's size is chosen from the
    free GPU memory and the KV cache a sequence needs (`auto_batch`); on CPU the evaluator's batch size holds."""

    backend = "transformers"

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        *,
        preset: GenerationPreset | None = None,
        auto_batch: bool = False,
    ):
        self.model = model
        self.tokenizer = tokenizer
        self.preset = preset or GenerationPreset(name="greedy")
        self.auto_batch = auto_batch
        self.context_cap = ContextCap()

    @property
    def config(self):
        return self.model.config

    @property
    def dtype(self) -> torch.dtype:
        return self.model.dtype

    @classmethod
    def load(
        cls,
        model_dir: Path,
        *,
        tokenizer_dir: Path | None = None,
        device: str = "cpu",
        preset: GenerationPreset | None = None,
        auto_batch: bool | None = None,
    ) -> Generator:
        model_dir = Path(model_dir)
        tokenizer = AutoTokenizer.from_pretrained(
            tokenizer_source(model_dir, tokenizer_dir),
            padding_side="left",
            trust_remote_code=False,
            local_files_only=True,
        )
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        on_gpu = device.startswith("cuda")
        multi = on_gpu and torch.cuda.device_count() > 1
        model = AutoModelForCausalLM.from_pretrained(
            model_dir,
            use_safetensors=True,  # never unpickle a submitted pytorch_model.bin
            trust_remote_code=False,
            local_files_only=True,
            dtype=torch.bfloat16 if on_gpu else torch.float32,
            device_map="auto" if multi else None,  # several GPUs: layers spread over them (accelerate)
        )
        if not multi:
            model = model.to(device)
        model.eval()
        return cls(model, tokenizer, preset=preset, auto_batch=on_gpu if auto_batch is None else auto_batch)

    def load_weights(self, model_dir: Path) -> None:
        """Replace the weights with another checkpoint of the same tensor layout (checked by the caller), keeping
        the model, its devices and the tokenizer: the reuse that spares a load per submission."""
        from safetensors.torch import load_file

        params = dict(self.model.named_parameters())
        with torch.no_grad():
            for f in sorted(Path(model_dir).glob("*.safetensors")):
                for name, tensor in load_file(str(f)).items():
                    if name not in params:
                        raise ValueError(f"{f.name}: tensor {name!r} is not a parameter of the loaded model")
                    params[name].copy_(tensor)

    def generate(
        self,
        prompts: list[str],
        *,
        max_new_tokens: int,
        batch_size: int = 64,
        stop: str | Sequence[str] | None = "\n",
        add_special_tokens: bool = True,
    ) -> list[str]:
        """Completions (greedy unless the preset samples), each cut at the earliest of the stop strings; a batch
        stops decoding once every sequence in it has produced one (or EOS) or filled the model's context (each
        prompt gets at most context − its length new tokens: ContextCap). A prompt rendered by a chat template
        already holds its special tokens: pass add_special_tokens=False, or a BOS is doubled."""
        stops = stop_strings(stop)
        # A fresh config, so sampling settings shipped with a submission cannot change grading.
        p = self.preset
        sampling = (
            dict(do_sample=True, temperature=p.temperature, top_p=p.top_p, top_k=p.top_k or None)
            if not p.greedy
            else dict(do_sample=False)
        )
        config = GenerationConfig(
            max_new_tokens=max_new_tokens,
            use_cache=True,  # trainers save use_cache=false in config.json; without the KV cache decoding is slow
            eos_token_id=self.tokenizer.eos_token_id,
            pad_token_id=self.tokenizer.pad_token_id,
            **sampling,
        )
        if not p.greedy:
            torch.manual_seed(p.seed)
        lengths = [len(self.tokenizer(x, add_special_tokens=add_special_tokens)["input_ids"]) for x in prompts]
        limits = self.context_cap.limits(lengths, max_new_tokens, context_length(self.config))
        # Batching similar lengths together wastes less compute on padding. A prompt with no room: "".
        order = sorted((i for i in range(len(prompts)) if limits[i] > 0), key=lambda i: lengths[i])
        outputs: list[str] = [""] * len(prompts)
        lo = 0
        while lo < len(order):
            size = (
                self._auto_batch_size(prompts[order[min(len(order), lo + batch_size) - 1]], max(limits))
                if self.auto_batch
                else batch_size
            )
            idx = order[lo : lo + size]
            for i, text in zip(
                idx,
                self._generate_batch(
                    [prompts[i] for i in idx],
                    config,
                    stops,
                    add_special_tokens,
                    [limits[i] for i in idx],
                    max_new_tokens,
                ),
            ):
                outputs[i] = text
            lo += len(idx)
        return outputs

    @torch.inference_mode()
    def first_token_logprobs(
        self, prompts: list[str], *, top: int, batch_size: int = 16, add_special_tokens: bool = True
    ) -> list[list[tuple[str, float]]]:
        """The `top` likeliest next tokens of each prompt with their log-probabilities, best first (a judge's
        verdict weighed by its first token's distribution)."""
        out: list[list[tuple[str, float]]] = []
        for lo in range(0, len(prompts), batch_size):
            enc = self.tokenizer(
                prompts[lo : lo + batch_size], return_tensors="pt", padding=True, add_special_tokens=add_special_tokens
            ).to(self.model.device)
            logprobs = self.model(**enc).logits[:, -1].float().log_softmax(-1)  # left padding: the last is real
            best = logprobs.topk(top)
            out += [
                [(self.tokenizer.decode([i]), v) for v, i in zip(vs, ids)]
                for vs, ids in zip(best.values.tolist(), best.indices.tolist())
            ]
        return out

    def _auto_batch_size(self, longest_prompt: str, max_new_tokens: int) -> int:
        """As many sequences as half the free GPU memory holds KV cache for (the other half: activations,
        logits), between 1 and 256."""
        c = self.model.config
        heads = getattr(c, "num_key_value_heads", None) or c.num_attention_heads
        head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        tokens = len(self.tokenizer(longest_prompt)["input_ids"]) + max_new_tokens
        per_seq = 2 * c.num_hidden_layers * heads * head_dim * tokens * self.model.dtype.itemsize
        free = min(torch.cuda.mem_get_info(d)[0] for d in range(torch.cuda.device_count()))
        return max(1, min(256, int(free * 0.5 // max(per_seq, 1))))

    @torch.inference_mode()
    def _generate_batch(
        self,
        prompts: list[str],
        config: GenerationConfig,
        stops: tuple[str, ...],
        add_special_tokens: bool,
        limits: list[int],
        asked: int,
    ) -> list[str]:
        enc = self.tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=add_special_tokens)
        enc = enc.to(self.model.device)
        prompt_len = enc["input_ids"].shape[1]
        criteria = StoppingCriteriaList([StopOnString(self.tokenizer, stops, prompt_len)] if stops else [])
        if min(limits) < max(limits):
            criteria.append(StopAtLimit(limits, prompt_len))
        config = copy.deepcopy(config)
        config.max_new_tokens = max(limits)
        out = self.model.generate(**enc, generation_config=config, stopping_criteria=criteria)
        new = [row[prompt_len : prompt_len + limit] for row, limit in zip(out, limits)]
        raw = self.tokenizer.batch_decode(new, skip_special_tokens=True)
        texts = [cut_at_stop(t, stops) for t in raw]
        ended = {self.tokenizer.eos_token_id, self.tokenizer.pad_token_id}  # EOS, or the padding after a stop
        self.context_cap.filled += sum(
            limit < asked and len(ids) == limit and ended.isdisjoint(ids.tolist()) and text == whole
            for ids, limit, text, whole in zip(new, limits, texts, raw)
        )
        return texts


def tokenizer_source(model_dir: Path, tokenizer_dir: Path | None) -> Path:
    """The submission's own tokenizer when it ships one, else the base model's."""
    model_dir = Path(model_dir)
    has_tokenizer = any((model_dir / f).exists() for f in TOKENIZER_FILES)
    return model_dir if has_tokenizer or tokenizer_dir is None else Path(tokenizer_dir)
