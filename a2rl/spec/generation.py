"""Generation presets (configs/generation/<name>.yaml): how the grader decodes a model's answers. Greedy by
default; the reference's per-model settings (Qwen3 sampling, thinking) are named presets a sweep picks per model
(`models: [{name, path, generation: qwen3-thinking}]`). Every ledger entry records the preset it was graded with.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from a2rl.spec.registry import HOME, Registry

DEFAULT_PRESET = "greedy"


class GenerationPreset(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    description: str = ""
    temperature: float = Field(0.0, ge=0)  # 0: greedy (top_p, top_k and seed unused)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(0, ge=0)  # 0: no top-k cut
    seed: int = 0  # sampling is seeded, so a sampled score is reproducible on one backend
    # passed to the tokenizer's chat template where a task formats chats (Qwen3: {enable_thinking: false})
    chat_template_kwargs: dict[str, Any] = {}

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def record(self) -> dict[str, Any]:
        """What a ledger entry keeps: the name and every setting."""
        return self.model_dump(exclude={"description"})


def preset_registry() -> Registry[GenerationPreset]:
    return Registry(GenerationPreset, "generation preset", HOME / "configs" / "generation", "A2RL_GENERATION_PATH")


def get_preset(name: str = DEFAULT_PRESET) -> GenerationPreset:
    return preset_registry().get(name)
