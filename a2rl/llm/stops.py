"""Stop strings: where generated text ends, the same for every engine (transformers, vLLM, the chat server)
and for the rewards that read it (a2rl.tasklib.answers)."""

from __future__ import annotations

from collections.abc import Sequence


def stop_strings(stop: str | Sequence[str] | None) -> tuple[str, ...]:
    """`stop` as a tuple of stop strings (none for None)."""
    stops = (stop,) if isinstance(stop, str) else tuple(stop or ())
    if not all(isinstance(s, str) and s for s in stops):
        raise ValueError(f"stop strings must be non-empty strings, got {stop!r}")
    return stops


def cut_at_stop(text: str, stop: str | Sequence[str] | None) -> str:
    """`text` up to the earliest occurrence of any stop string."""
    return text[: min((i for s in stop_strings(stop) if (i := text.find(s)) >= 0), default=len(text))]
