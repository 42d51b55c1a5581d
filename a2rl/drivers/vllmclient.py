"""The vLLM backend of local drivers: vLLM generates, our server (chatserver.py) speaks the protocols. Each
request's prompt is rendered on the chat template and fitted to the context by ChatModel, exactly as for the
transformers backend, and sent as token ids to vLLM's OpenAI-compatible `/v1/completions` on loopback, which
answers only the driver server (its own key); agents see our server alone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.error import HTTPError, URLError
from urllib.request import Request

from a2rl.drivers.chatserver import ChatModel
from a2rl.errors import InfraError
from a2rl.siteproxy import urlopen


class VLLMChatModel(ChatModel):
    """Generation through a vLLM server at `url` (`http://127.0.0.1:PORT`) serving `served` with key `key`;
    requests go concurrently (each in its server thread), which vLLM batches. context: its max_model_len (None:
    the model config's max_position_embeddings)."""

    def __init__(
        self,
        model_dir: Path,
        url: str,
        served: str,
        key: str,
        context: int | None = None,
        fit_prompt: bool = True,
        max_output: int | None = None,
        timeout_s: float = 3600.0,
    ):
        from transformers import AutoConfig, AutoTokenizer

        if context is None:
            context = int(getattr(AutoConfig.from_pretrained(model_dir), "max_position_embeddings", 4096))
        super().__init__(AutoTokenizer.from_pretrained(model_dir), model_dir, served, context, fit_prompt, max_output)
        self.url, self.key, self.timeout_s = url.rstrip("/"), key, timeout_s

    def _generate(
        self, ids: list[int], max_tokens: int, stops: list[str], top: int | None
    ) -> tuple[str, str, list[dict[str, Any]], dict[str, int]]:
        body: dict[str, Any] = {
            "model": self.model_id,
            "prompt": ids,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "stop": stops,
            "n": 1,
        }
        if top is not None:
            body["logprobs"] = top
        req = Request(
            self.url + "/v1/completions",
            json.dumps(body).encode(),
            {"Content-Type": "application/json", "Authorization": f"Bearer {self.key}"},
        )
        try:
            with urlopen(req, timeout=self.timeout_s, direct=True) as r:
                doc = json.loads(r.read())
        except HTTPError as e:  # a 500 to the client: the model server failed, not its request
            raise InfraError(f"vLLM answered {e.code}: {e.read()[:500].decode(errors='replace')}") from None
        except URLError as e:
            raise InfraError(f"vLLM did not answer: {e.reason}") from None
        choice = doc["choices"][0]
        usage = doc["usage"]
        usage = {
            "prompt_tokens": usage["prompt_tokens"],
            "completion_tokens": usage["completion_tokens"],
            "total_tokens": usage["prompt_tokens"] + usage["completion_tokens"],
        }
        finish = "length" if choice.get("finish_reason") == "length" else "stop"
        return choice["text"], finish, _logprobs(choice.get("logprobs")) if top is not None else [], usage


def _logprobs(legacy: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The completions API's logprobs (parallel lists) in the chat completions form the judge reads."""
    if not legacy:
        return []
    return [
        {"token": token, "logprob": lp, "top_logprobs": [{"token": t, "logprob": v} for t, v in (top or {}).items()]}
        for token, lp, top in zip(
            legacy["tokens"], legacy["token_logprobs"], legacy.get("top_logprobs") or [None] * len(legacy["tokens"])
        )
    ]
