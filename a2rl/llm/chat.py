"""Chat rendering: messages into the prompt a model reads, with its own chat template (the grader, the chat
server, the reference agent and the tasks' evaluators all render here, so a model is trained on the prompt it is
graded on)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Messages = list[dict[str, str]]
MAX_TOP_LOGPROBS = 20  # the OpenAI API's limit; the local server keeps it so options stay portable


def chat_prompt(tokenizer: Any, messages: Messages, template_kwargs: Mapping[str, Any] | None = None) -> str:
    """The model's own chat format (rendered with `template_kwargs`, e.g. Qwen3's enable_thinking), or a plain
    transcript for tokenizers that ship none (some base models)."""
    if tokenizer.chat_template:
        return tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True, **(template_kwargs or {})
        )
    return "".join(f"{m['role'].capitalize()}: {m['content']}\n" for m in messages) + "Assistant:"


def policy_prompt(generator: Any, messages: Messages) -> str:
    """A chat prompt for the graded model: its chat template with its generation preset's chat_template_kwargs."""
    return chat_prompt(generator.tokenizer, messages, generator.preset.chat_template_kwargs)
