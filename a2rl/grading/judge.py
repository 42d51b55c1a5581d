"""LLM judges for the judge-based tasks: an OpenAI-compatible chat client and the pairwise protocol the tasks
share (the server for a local judge model is in chatserver.py).

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
import math
import os
import statistics
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.error import HTTPError, URLError
from urllib.request import Request, urlopen

from a2rl.errors import InfraError, format_validation_error
from a2rl.grading.backends import CPU_SETTINGS, Engine
from a2rl.spec.models import resolve_model
from a2rl.tasklib.prompts import Messages, instruction_messages

from pydantic import BaseModel, ConfigDict, ValidationError

log = logging.getLogger("a2rl.judge")

# Worth another try: rate limits, overload and server errors. Other 4xx are our own mistakes.
RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})
MAX_TOP_LOGPROBS = 20  # the OpenAI API's limit; the local server keeps it so options stay portable


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


class ChatClient:
    def __init__(self, base_url: str, model: str, *, api_key: str | None = None, timeout_s: float = 120.0,
                 retries: int = 4, backoff_s: float = 1.0, workers: int = 8, max_tokens: int | None = None):
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.timeout_s, self.retries, self.backoff_s, self.workers = timeout_s, retries, backoff_s, workers
        self.max_tokens = max_tokens
        self._api_key = api_key
        self._lock = threading.Lock()
        self._served: set[tuple[str, str]] = set()
        self.requests = 0

    @classmethod
    def from_options(cls, judge: dict[str, Any]) -> ChatClient:
        s = JudgeSettings.model_validate(judge)
        key = None
        if s.api_key_env:
            key = os.environ.get(s.api_key_env)
            if not key:
                raise JudgeError(f"the judge's API key variable {s.api_key_env} is not set or empty")
        return cls(s.base_url, s.model, api_key=key, timeout_s=s.timeout_s, retries=s.retries, workers=s.workers,
                   max_tokens=s.max_tokens)

    def __repr__(self) -> str:  # the key stays out of logs and tracebacks
        return f"ChatClient({self.base_url!r}, {self.model!r})"

    def chat(self, messages: Messages, *, max_tokens: int, top_logprobs: int | None = None) -> Completion:
        body: dict[str, Any] = {"model": self.model, "messages": messages, "temperature": 0,
                                "max_tokens": self.max_tokens or max_tokens}
        if top_logprobs:
            body.update(logprobs=True, top_logprobs=top_logprobs)
        data = self._post("/chat/completions", body)
        try:
            choice = data["choices"][0]
            content = (choice.get("logprobs") or {}).get("content") or []
            first = tuple((t["token"], float(t["logprob"])) for t in content[0]["top_logprobs"]) if content else ()
            done = Completion(choice["message"].get("content") or "", first, str(data.get("model", "")),
                              data.get("system_fingerprint"))
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise JudgeError(f"malformed chat completion from {self.base_url}: {e!r}") from None
        with self._lock:
            self.requests += 1
            self._served.add((done.model, done.system_fingerprint or ""))
        return done

    def chat_many(self, conversations: Sequence[Messages], *, max_tokens: int,
                  top_logprobs: int | None = None) -> list[Completion]:
        """Completions in order, `workers` requests in flight at a time."""
        with ThreadPoolExecutor(max(1, self.workers)) as pool:
            return list(pool.map(lambda m: self.chat(m, max_tokens=max_tokens, top_logprobs=top_logprobs),
                                 conversations))

    def describe(self) -> dict[str, Any]:
        """Who judged: for the score's details."""
        return {"model": self.model, "version": ", ".join(sorted({m for m, _ in self._served})),
                "system_fingerprint": ", ".join(sorted({f for _, f in self._served if f})),
                "base_url": self.base_url, "requests": self.requests}

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        url = self.base_url + path
        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        payload = json.dumps(body).encode()
        for attempt in range(self.retries + 1):
            try:
                with urlopen(Request(url, data=payload, headers=headers), timeout=self.timeout_s) as resp:
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


class EngineJudge:
    """A local judge model served in process by the grader's engine (grading/backends.py: its backend, vLLM where
    chosen), greedy; asked like ChatClient (`chat_many`, `describe`). The engine holds one model: judging swaps
    the policy out (its answers are generated first) and the next submission swaps it back (a weights reload
    where the judge shares the policy's architecture, as the base model does)."""

    def __init__(self, engine: Any, model_dir: Any, *, max_tokens: int | None = None):
        from a2rl.spec.generation import get_preset
        from a2rl.spec.models import weights_hash

        self.engine, self.model_dir, self.max_tokens = engine, model_dir, max_tokens
        self.model = model_dir.name
        self.fingerprint = "wh-" + weights_hash(model_dir)[:16]
        self._preset = get_preset()  # greedy
        self.requests = 0

    def __repr__(self) -> str:
        return f"EngineJudge({str(self.model_dir)!r})"

    def chat_many(self, conversations: Sequence[Messages], *, max_tokens: int,
                  top_logprobs: int | None = None) -> list[Completion]:
        judge = self.engine.get(self.model_dir, self.model_dir, self._preset)
        prompts = [chat_prompt(judge.tokenizer, m) for m in conversations]
        raw = not judge.tokenizer.chat_template  # a chat template writes its own special tokens
        texts = judge.generate(prompts, max_new_tokens=self.max_tokens or max_tokens, stop=None,
                               add_special_tokens=raw)
        firsts = judge.first_token_logprobs(prompts, top=top_logprobs, add_special_tokens=raw) if top_logprobs \
            else [()] * len(prompts)
        self.requests += len(prompts)
        return [Completion(t, tuple(f), self.model, self.fingerprint) for t, f in zip(texts, firsts)]

    def describe(self) -> dict[str, Any]:
        return {"model": self.model, "version": self.model, "system_fingerprint": self.fingerprint,
                "model_path": str(self.model_dir), "backend": self.engine.settings.backend,
                "requests": self.requests}


def judge_client(judge: Mapping[str, Any], engine: Any = None) -> ChatClient | EngineJudge:
    """The judge that `options["judge"]` names: an OpenAI-compatible endpoint (base_url, model...) or an open-weight
    model run on the grader's engine, on its backend (model_path; without an engine, as when an evaluator is called
    directly: a transformers engine on CPU, as evaluate_model makes); exactly one of the two."""
    if not isinstance(judge, Mapping):
        raise JudgeError(f"the task option judge must be a mapping (base_url, model... or model_path), not {judge!r}")
    endpoint, local = "base_url" in judge, "model_path" in judge
    if endpoint == local:
        raise JudgeError("the task option judge needs exactly one of base_url (an OpenAI-compatible endpoint) and "
                         f"model_path (a local model run by the grader); it has {'both' if endpoint else 'neither'}")
    try:
        if endpoint:
            return ChatClient.from_options(dict(judge))
        settings = LocalJudgeSettings.model_validate(judge)
    except ValidationError as e:
        raise JudgeError("the task option judge: " + "; ".join(format_validation_error(e))) from None
    model_dir = resolve_model(settings.model_path)
    if not model_dir.is_dir():
        raise JudgeError(f"the task option judge.model_path: {model_dir} is not a model directory")
    return EngineJudge(engine or Engine(CPU_SETTINGS), model_dir, max_tokens=settings.max_tokens)


def chat_prompt(tokenizer: Any, messages: Messages, template_kwargs: Mapping[str, Any] | None = None) -> str:
    """The model's own chat format (rendered with `template_kwargs`, e.g. Qwen3's enable_thinking), or a plain
    transcript for tokenizers that ship none (some base models)."""
    if tokenizer.chat_template:
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                             **(template_kwargs or {}))
    return "".join(f"{m['role'].capitalize()}: {m['content']}\n" for m in messages) + "Assistant:"


def policy_prompt(generator: Any, messages: Messages) -> str:
    """A chat prompt for the graded model: its chat template with its generation preset's chat_template_kwargs."""
    return chat_prompt(generator.tokenizer, messages, generator.preset.chat_template_kwargs)


# ---------------------------------------------------------------- the pairwise protocol

PAIRWISE_SYSTEM = (
    "You are an impartial judge of instruction following. You see an instruction and two responses to it, A and B. "
    "Decide which response serves the user better: correct, helpful, honest and to the point. Do not let the "
    "order of the responses or their length sway you. Reply with a single letter: A or B."
)
PAIRWISE_MAX_TOKENS = 1  # the verdict is the first token; its logprobs weigh A against B


def pairwise_messages(instruction: str, a: str, b: str) -> Messages:
    return [{"role": "system", "content": PAIRWISE_SYSTEM},
            {"role": "user", "content": f"# Instruction\n{instruction}\n\n# Response A\n{a}\n\n# Response B\n{b}\n\n"
                                        "Which response is better? Answer A or B."}]


def prefers_first(c: Completion) -> float | None:
    """P(the judge prefers response A): from the first token's logprobs where the endpoint returns them (as
    AlpacaEval 2.0 weighs its judge's tokens), else from the letter written; None when it gave neither."""
    mass = {"A": 0.0, "B": 0.0}
    for token, logprob in c.first_token_logprobs:
        if token.strip() in mass:
            mass[token.strip()] += math.exp(logprob)
    if mass["A"] + mass["B"] > 0:
        return mass["A"] / (mass["A"] + mass["B"])
    return {"A": 1.0, "B": 0.0}.get(c.text.strip()[:1])


@dataclass(frozen=True)
class Comparison:
    answers: list[str]  # the policy's answers, stripped
    preferences: list[float]  # P(answer beats reference), both presentation orders averaged
    unparsed: int  # verdicts with neither logprobs nor a letter, counted as ties


def generate_answers(generator: Any, instructions: Sequence[str], *, max_new_tokens: int,
                     batch_size: int) -> list[str]:
    """The policy's answers: each instruction as one user turn in its chat template, greedy, stripped."""
    prompts = [policy_prompt(generator, instruction_messages(i)) for i in instructions]
    return [a.strip() for a in generator.generate(prompts, max_new_tokens=max_new_tokens, batch_size=batch_size,
                                                   stop=None)]


def compare_to_references(generator: Any, instructions: Sequence[str], references: Sequence[str],
                          client: ChatClient | EngineJudge, *, max_new_tokens: int, batch_size: int) -> Comparison:
    """Answer each instruction with the policy (see generate_answers), then have the judge compare each
    answer with its reference twice, once in each position, so that a judge's order bias cancels out."""
    answers = generate_answers(generator, instructions, max_new_tokens=max_new_tokens, batch_size=batch_size)
    return Comparison(answers, *judge_against_references(client, instructions, answers, references))


def judge_against_references(client: ChatClient, instructions: Sequence[str], answers: Sequence[str],
                             references: Sequence[str]) -> tuple[list[float], int]:
    """P(answer beats reference) per instruction, judged in both presentation orders and averaged; and the
    number of verdicts with neither logprobs nor a letter (counted as ties)."""
    conversations = []
    for instruction, answer, reference in zip(instructions, answers, references, strict=True):
        conversations += [pairwise_messages(instruction, answer, reference),
                          pairwise_messages(instruction, reference, answer)]
    verdicts = [prefers_first(c) for c in client.chat_many(conversations, max_tokens=PAIRWISE_MAX_TOKENS,
                                                            top_logprobs=MAX_TOP_LOGPROBS)]
    unparsed = sum(v is None for v in verdicts)
    votes = [0.5 if v is None else v for v in verdicts]
    return [(first + 1 - second) / 2 for first, second in zip(votes[::2], votes[1::2])], unparsed


def win_rate_summary(c: Comparison, references: Sequence[str]) -> dict[str, Any]:
    """AlpacaEval's head-to-head numbers (win rate and its standard error in percent)."""
    n = len(c.preferences)
    return {"win_rate": 100 * statistics.fmean(c.preferences),
            "standard_error": 100 * statistics.stdev(c.preferences) / math.sqrt(n) if n > 1 else 0.0,
            "n_total": n, "n_wins": sum(p > 0.5 for p in c.preferences),
            "n_draws": sum(p == 0.5 for p in c.preferences),
            "avg_length": statistics.fmean(map(len, c.answers)),
            "reference_avg_length": statistics.fmean(map(len, references)),
            "unparsed_verdicts": c.unparsed}
