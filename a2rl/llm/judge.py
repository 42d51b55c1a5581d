"""LLM judges for the judge-based tasks: an OpenAI-compatible chat client, or a local judge model on the
grader's engine (the tasks' pairwise protocol is in a2rl/tasklib/pairwise.py; the server for a local judge model
is in drivers/chatserver.py).

- `ChatClient` POSTs {base_url}/chat/completions over urllib (no SDK: graders also run on air-gapped nodes),
  always greedy (temperature 0), with a timeout and retries with exponential backoff. The API key comes from
  the environment variable named in the task options and is sent only in the Authorization header.
- Every verdict says who gave it: responses carry the served model name and a fingerprint, which the client
  collects for the score's details (`ChatClient.describe()`).
- `EngineJudge` runs an open-weight judge on the grader's own engine instead; `judge_client` turns a task's
  `judge` option into one or the other.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.error import HTTPError, URLError
from urllib.request import Request

from pydantic import BaseModel, ConfigDict, ValidationError

from a2rl.errors import InfraError, format_validation_error
from a2rl.llm.backends import CPU_SETTINGS, Engine
from a2rl.llm.chat import Messages, chat_prompt
from a2rl.siteproxy import urlopen
from a2rl.store.modeldirs import resolve_model

log = logging.getLogger("a2rl.judge")

# Worth another try: rate limits, overload and server errors. Other 4xx are our own mistakes.
RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})


class JudgeError(InfraError):
    """The judge failed or is misconfigured: the grader's problem, never the submitted model's."""


class JudgeSettings(BaseModel):
    """`options["judge"]` of a judge-based task (task.yaml `eval`, overridden by the sweep's task_options)."""

    model_config = ConfigDict(extra="forbid")
    base_url: str  # e.g. https://api.openai.com/v1
    model: str
    api_key_env: str | None = None  # the variable holding the key; None for endpoints without auth
    timeout_s: float = 120.0
    retries: int = 4
    workers: int = 8  # concurrent requests
    max_tokens: int | None = None  # overrides the protocol's own limit (reasoning models need room to think)


class LocalJudgeSettings(BaseModel):
    """`options["judge"]` naming an open-weight judge, served by the grader's own engine (EngineJudge)."""

    model_config = ConfigDict(extra="forbid")
    model_path: str  # a model directory or builtin:NAME
    max_tokens: int | None = None  # overrides the protocol's own limit, as for an endpoint


@dataclass(frozen=True)
class Completion:
    text: str
    first_token_logprobs: tuple[tuple[str, float], ...]  # the top alternatives for the first token, if returned
    model: str  # as served: the resolved snapshot name for hosted APIs
    system_fingerprint: str | None
    input_tokens: int | None = None  # as the endpoint reported them (None: it did not)
    output_tokens: int | None = None


class ChatClient:
    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 120.0,
        retries: int = 4,
        backoff_s: float = 1.0,
        workers: int = 8,
        max_tokens: int | None = None,
        direct: bool = False,
    ):
        self.base_url = base_url.rstrip("/")
        self.direct = direct  # a2rl's own server (a local driver): never through the site's proxy
        self.model = model
        self.timeout_s, self.retries, self.backoff_s, self.workers = timeout_s, retries, backoff_s, workers
        self.max_tokens = max_tokens
        self._api_key = api_key
        self._lock = threading.Lock()
        self._served: set[tuple[str, str]] = set()
        self.requests = 0
        self.input_tokens = self.output_tokens = 0  # summed over the completions that reported them

    @classmethod
    def from_options(cls, judge: dict[str, Any]) -> ChatClient:
        s = JudgeSettings.model_validate(judge)
        key = None
        if s.api_key_env:
            key = os.environ.get(s.api_key_env)
            if not key:
                raise JudgeError(f"the judge's API key variable {s.api_key_env} is not set or empty")
        return cls(
            s.base_url,
            s.model,
            api_key=key,
            timeout_s=s.timeout_s,
            retries=s.retries,
            workers=s.workers,
            max_tokens=s.max_tokens,
        )

    def __repr__(self) -> str:  # the key stays out of logs and tracebacks
        return f"ChatClient({self.base_url!r}, {self.model!r})"

    def chat(self, messages: Messages, *, max_tokens: int, top_logprobs: int | None = None) -> Completion:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": 0,
            "max_tokens": self.max_tokens or max_tokens,
        }
        if top_logprobs:
            body.update(logprobs=True, top_logprobs=top_logprobs)
        data = self._post("/chat/completions", body)
        try:
            choice = data["choices"][0]
            content = (choice.get("logprobs") or {}).get("content") or []
            first = tuple((t["token"], float(t["logprob"])) for t in content[0]["top_logprobs"]) if content else ()
            usage = data.get("usage") or {}
            done = Completion(
                choice["message"].get("content") or "",
                first,
                str(data.get("model", "")),
                data.get("system_fingerprint"),
                _tokens(usage, "prompt_tokens"),
                _tokens(usage, "completion_tokens"),
            )
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise JudgeError(f"malformed chat completion from {self.base_url}: {e!r}") from None
        return self._count(done)

    def _count(self, done: Completion) -> Completion:
        with self._lock:
            self.requests += 1
            self._served.add((done.model, done.system_fingerprint or ""))
            self.input_tokens += done.input_tokens or 0
            self.output_tokens += done.output_tokens or 0
        return done

    def chat_many(
        self, conversations: Sequence[Messages], *, max_tokens: int, top_logprobs: int | None = None
    ) -> list[Completion]:
        """Completions in order, `workers` requests in flight at a time."""
        with ThreadPoolExecutor(max(1, self.workers)) as pool:
            return list(
                pool.map(lambda m: self.chat(m, max_tokens=max_tokens, top_logprobs=top_logprobs), conversations)
            )

    def describe(self) -> dict[str, Any]:
        """Who judged: for the score's details."""
        return {
            "model": self.model,
            "version": ", ".join(sorted({m for m, _ in self._served})),
            "system_fingerprint": ", ".join(sorted({f for _, f in self._served if f})),
            "base_url": self.base_url,
            "requests": self.requests,
        }

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        url = self.base_url + path
        headers = {"Content-Type": "application/json", **self._headers()}
        payload = json.dumps(body).encode()
        for attempt in range(self.retries + 1):
            try:
                req = Request(url, data=payload, headers=headers)
                with urlopen(req, timeout=self.timeout_s, direct=self.direct) as resp:
                    return json.load(resp)
            except HTTPError as e:
                failure = f"HTTP {e.code}: {e.read()[:300].decode(errors='replace')}"
                if e.code not in RETRY_STATUS:
                    raise JudgeError(f"{url} answered {failure}") from None
            except (URLError, OSError, http.client.HTTPException, ValueError) as e:
                failure = repr(e)
            if attempt < self.retries:
                delay = self.backoff_s * 2**attempt
                log.warning("judge request to %s failed (%s); retrying in %.1f s", url, failure, delay)
                time.sleep(delay)
        raise JudgeError(f"{url} failed {self.retries + 1} times; last: {failure}")


def _tokens(usage: Any, key: str) -> int | None:
    value = usage.get(key) if isinstance(usage, dict) else None
    return int(value) if isinstance(value, (int, float)) else None


class AnthropicClient(ChatClient):
    """A ChatClient for Anthropic's Messages API ({base_url}/messages, the key in x-api-key): the system message
    goes into `system`, the text blocks of the answer are joined. No logprobs (the API has none)."""

    VERSION = "2023-06-01"

    def __repr__(self) -> str:
        return f"AnthropicClient({self.base_url!r}, {self.model!r})"

    def _headers(self) -> dict[str, str]:
        return {"anthropic-version": self.VERSION, **({"x-api-key": self._api_key} if self._api_key else {})}

    def chat(self, messages: Messages, *, max_tokens: int, top_logprobs: int | None = None) -> Completion:
        if top_logprobs:
            raise JudgeError("Anthropic's Messages API returns no logprobs")
        system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [m for m in messages if m["role"] != "system"],
            "temperature": 0,
            "max_tokens": self.max_tokens or max_tokens,
        }
        if system:
            body["system"] = system
        data = self._post("/messages", body)
        try:
            text = "".join(b["text"] for b in data["content"] if b.get("type") == "text")
            usage = data.get("usage") or {}
            done = Completion(
                text,
                (),
                str(data.get("model", "")),
                None,
                _tokens(usage, "input_tokens"),
                _tokens(usage, "output_tokens"),
            )
        except (KeyError, TypeError, AttributeError) as e:
            raise JudgeError(f"malformed Messages answer from {self.base_url}: {e!r}") from None
        return self._count(done)


class EngineJudge:
    """A local judge model served in process by the grader's engine (llm/backends.py: its backend, vLLM where
    chosen), greedy; asked like ChatClient (`chat_many`, `describe`). The engine holds one model: judging swaps
    the policy out (its answers are generated first) and the next submission swaps it back (a weights reload
    where the judge shares the policy's architecture, as the base model does)."""

    def __init__(self, engine: Any, model_dir: Any, *, max_tokens: int | None = None):
        from a2rl.spec.generation import get_preset
        from a2rl.weights import weights_hash

        self.engine, self.model_dir, self.max_tokens = engine, model_dir, max_tokens
        self.model = model_dir.name
        self.fingerprint = "wh-" + weights_hash(model_dir)[:16]
        self._preset = get_preset()  # greedy
        self.requests = 0

    def __repr__(self) -> str:
        return f"EngineJudge({str(self.model_dir)!r})"

    def chat_many(
        self, conversations: Sequence[Messages], *, max_tokens: int, top_logprobs: int | None = None
    ) -> list[Completion]:
        judge = self.engine.get(self.model_dir, self.model_dir, self._preset)
        prompts = [chat_prompt(judge.tokenizer, m) for m in conversations]
        raw = not judge.tokenizer.chat_template  # a chat template writes its own special tokens
        texts = judge.generate(prompts, max_new_tokens=self.max_tokens or max_tokens, stop=None, add_special_tokens=raw)
        firsts = (
            judge.first_token_logprobs(prompts, top=top_logprobs, add_special_tokens=raw)
            if top_logprobs
            else [()] * len(prompts)
        )
        self.requests += len(prompts)
        return [Completion(t, tuple(f), self.model, self.fingerprint) for t, f in zip(texts, firsts)]

    def describe(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "version": self.model,
            "system_fingerprint": self.fingerprint,
            "model_path": str(self.model_dir),
            "backend": self.engine.settings.backend,
            "requests": self.requests,
        }


def judge_client(judge: Mapping[str, Any], engine: Any = None) -> ChatClient | EngineJudge:
    """The judge that `options["judge"]` names: an OpenAI-compatible endpoint (base_url, model...) or an open-weight
    model run on the grader's engine, on its backend (model_path; without an engine, as when an evaluator is called
    directly: a transformers engine on CPU, as evaluate_model makes); exactly one of the two."""
    if not isinstance(judge, Mapping):
        raise JudgeError(f"the task option judge must be a mapping (base_url, model... or model_path), not {judge!r}")
    endpoint, local = "base_url" in judge, "model_path" in judge
    if endpoint == local:
        raise JudgeError(
            "the task option judge needs exactly one of base_url (an OpenAI-compatible endpoint) and "
            f"model_path (a local model run by the grader); it has {'both' if endpoint else 'neither'}"
        )
    try:
        if endpoint:
            return ChatClient.from_options(dict(judge))
        settings = LocalJudgeSettings.model_validate(judge)
    except ValidationError as e:
        lines = format_validation_error(e, LocalJudgeSettings if local else None)
        raise JudgeError("the task option judge: " + "; ".join(lines)) from None
    model_dir = resolve_model(settings.model_path)
    if not model_dir.is_dir():
        raise JudgeError(f"the task option judge.model_path: {model_dir} is not a model directory")
    return EngineJudge(engine or Engine(CPU_SETTINGS), model_dir, max_tokens=settings.max_tokens)
