"""Fakes shared by the tests: stand-ins for the grader's LLM policy and for vLLM (its engine and its HTTP
server), a virtual clock, and wrappers that install a fake agent CLI (tests/fixtures/fakecli) under a stack's
binary name."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Self

from a2rl.store.ledger import LedgerEntry


def _words(text: str, add_special_tokens: bool = True) -> dict:
    """A tokenizer that counts words: enough for the prompt-length checks of the batched ReAct loop."""
    return {"input_ids": text.split()}


class FakeGenerator:
    """Shaped like a2rl.llm.inference.Generator (`generate`, `config`, `tokenizer`, `preset`), configured with
    exactly one of: `reply` (every prompt gets it), `replies` (handed out one per prompt, in order, across
    calls), `script` (a function of the prompt). It records the prompts, the stop argument of each call and the
    number of calls; `cut=True` cuts each completion at the stop strings, as the real one does."""

    def __init__(
        self,
        reply: str | None = None,
        *,
        replies: Sequence[str] | None = None,
        script: Callable[[str], str] | None = None,
        cut: bool = False,
        tokenizer=None,
        context: int = 1 << 20,
        preset=None,
    ):
        from a2rl.spec.generation import GenerationPreset

        if sum(x is not None for x in (reply, replies, script)) != 1:
            raise ValueError("FakeGenerator takes exactly one of reply, replies, script")
        self._reply, self._replies, self._script, self._cut = reply, list(replies or ()), script, cut
        self.model = SimpleNamespace(config=SimpleNamespace(max_position_embeddings=context))
        self.config = self.model.config
        self.tokenizer = tokenizer or _words
        self.preset = preset or GenerationPreset(name="greedy")
        self.prompts: list[str] = []
        self.stops: list[str | Sequence[str] | None] = []
        self.calls = 0

    def generate(
        self,
        prompts: list[str],
        *,
        max_new_tokens: int,
        batch_size: int = 64,
        stop: str | Sequence[str] | None = "\n",
        add_special_tokens: bool = True,
    ) -> list[str]:
        self.calls += 1
        self.stops.append(stop)
        out = [self._answer(p, len(self.prompts) + i) for i, p in enumerate(prompts)]
        self.prompts += prompts
        if not self._cut:
            return out
        from a2rl.llm.stops import cut_at_stop  # torch: only for the tests that need it

        return [cut_at_stop(t, stop) for t in out]

    def _answer(self, prompt: str, index: int) -> str:
        if self._script is not None:
            return self._script(prompt)
        if self._reply is not None:
            return self._reply
        if index >= len(self._replies):
            raise AssertionError(f"FakeGenerator: prompt {index + 1} but only {len(self._replies)} replies")
        return self._replies[index]


class FakeClock:
    """Virtual time for code that reads time.monotonic()/time.time() and waits with time.sleep(): sleeping
    advances the clock at once, so a test can bound what the code accounts (a budget) exactly. It stands in
    for a module's `time` (monkeypatch.setattr(module, "time", clock)), where other names come from the real
    one, or for an injected clock function (calling it gives monotonic()). `at[t] = fn` runs fn once the clock
    passes t."""

    def __init__(self, start: float = 1000.0, epoch: float = 1.7e9):
        self.now = start
        self._epoch = epoch  # time() = epoch + now, so both clocks move together
        self.at: dict[float, Callable[[], object]] = {}

    def monotonic(self) -> float:
        return self.now

    __call__ = monotonic

    def time(self) -> float:
        return self._epoch + self.now

    def sleep(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("sleep length must be non-negative")
        self.now += seconds
        for when in sorted(w for w in self.at if w <= self.now):
            self.at.pop(when)()

    advance = sleep

    def __getattr__(self, name: str):
        return getattr(time, name)


class RecordingSamplingParams:
    """STAND-IN for vllm.SamplingParams (vLLM cannot be installed here): keeps its keyword arguments."""

    def __init__(self, **kwargs):
        self.kwargs = kwargs


class RecordingVLLM:
    """STAND-IN for vllm.LLM, for plumbing-only tests (tests/test_vllm_real.py runs the real one). It records how
    a2rl drives the engine: the constructor's arguments, `collective_rpc` calls, `reset_prefix_cache`, the engine's
    shutdown, and each `generate` call's prompts and sampling parameters. It proves our plumbing (when an engine
    starts, when weights are reloaded), not vLLM.
    Every completion is `reply` (default: the prompt's word count and a newline, so stop cuts are visible).
    `instances` lists every engine made, across the test."""

    instances: list[RecordingVLLM] = []

    def __init__(self, reply: Callable[[str], str] | None = None, **kwargs):
        from transformers import AutoTokenizer

        self.kwargs = kwargs
        self.calls: list[tuple] = []
        self._reply = reply or (lambda p: f" {len(p.split())}\nmore")
        self._tokenizer = AutoTokenizer.from_pretrained(kwargs["tokenizer"], local_files_only=True)
        RecordingVLLM.instances.append(self)

    def get_tokenizer(self):
        return self._tokenizer

    def collective_rpc(self, method: str, args: tuple = (), kwargs: dict | None = None):
        self.calls.append(("collective_rpc", method, args, kwargs or {}))
        return []

    def reset_prefix_cache(self) -> bool:
        self.calls.append(("reset_prefix_cache",))
        return True

    @property
    def llm_engine(self) -> SimpleNamespace:
        """vLLM's engine, as far as shutting it down goes (`llm_engine.engine_core.shutdown`)."""
        return SimpleNamespace(
            engine_core=SimpleNamespace(shutdown=lambda timeout=None: self.calls.append(("shutdown",)))
        )

    def generate(self, prompts: list, sampling_params: RecordingSamplingParams, use_tqdm: bool = True):
        """Prompts are text or token ids ({"prompt_token_ids": [...]}, vLLM's TokensPrompt), recorded as given."""
        self.calls.append(("generate", list(prompts), sampling_params.kwargs))
        texts = [p if isinstance(p, str) else self._tokenizer.decode(p["prompt_token_ids"]) for p in prompts]
        return [SimpleNamespace(outputs=[self._completion(self._reply(t), sampling_params.kwargs)]) for t in texts]

    def _completion(self, text: str, kwargs: dict) -> SimpleNamespace:
        """With `logprobs` asked for, the first token of the reply gets probability 1 (vLLM's Logprob records)."""
        if not kwargs.get("logprobs"):
            return SimpleNamespace(text=text, finish_reason="stop")
        first = self._tokenizer(text, add_special_tokens=False)["input_ids"][0]
        return SimpleNamespace(
            text=text, logprobs=[{first: SimpleNamespace(logprob=0.0, decoded_token=self._tokenizer.decode([first]))}]
        )


class LoopbackServer:
    """A request handler served on 127.0.0.1 from a daemon thread while `with` holds it (the test servers'
    common part); `_serve` binds it (port 0: a free one) and returns the port."""

    def _serve(self, handler: type, port: int = 0, poll_s: float = 0.5) -> int:
        import threading
        from http.server import ThreadingHTTPServer

        self._server = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(poll_s,), daemon=True)
        return self._server.server_address[1]

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


class RecordingVLLMServer(LoopbackServer):
    """STAND-IN for vLLM's OpenAI-compatible server (vLLM cannot be installed here): plays its `/health` and
    `/v1/completions` (token-id prompts, greedy, legacy logprobs) on loopback, checks its bearer key, and
    records each completion request's body in `requests` (and as a JSON line in `record_to`, for one run as
    vLLM's process: tests/fixtures/vllm_standin). Every completion's text is `reply(prompt_ids)` (default:
    "ok"), its token count the text's word count. It proves our plumbing, not vLLM.
    Use as `with RecordingVLLMServer(key) as vllm:`; `vllm.url` is `http://127.0.0.1:PORT`."""

    def __init__(
        self, key: str, reply: Callable[[list[int]], str] | None = None, port: int = 0, record_to: str | None = None
    ):
        from a2rl.httpjson import JSONRequestHandler

        self.key, self.reply = key, reply or (lambda ids: "ok")
        self.requests: list[dict] = []
        outer = self

        class Handler(JSONRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/health":
                    return self.send_json(200, {})
                self.send_json(404, {"error": "no route"})

            def do_POST(self) -> None:
                if self.headers.get("Authorization") != f"Bearer {outer.key}":
                    return self.send_json(401, {"error": "Unauthorized"})
                if self.path != "/v1/completions":
                    return self.send_json(404, {"error": "no route"})
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(body)
                if record_to:
                    with open(record_to, "a") as f:
                        f.write(json.dumps(body) + "\n")
                text = outer.reply(body["prompt"])
                words = text.split()
                choice = {"index": 0, "text": text, "finish_reason": "stop", "logprobs": None}
                if body.get("logprobs") is not None:
                    choice["logprobs"] = {
                        "tokens": words,
                        "token_logprobs": [-0.5] * len(words),
                        "top_logprobs": [{w: -0.5, "other": -1.5} for w in words],
                    }
                self.send_json(
                    200,
                    {
                        "id": "cmpl-1",
                        "object": "text_completion",
                        "model": body["model"],
                        "choices": [choice],
                        "usage": {"prompt_tokens": len(body["prompt"]), "completion_tokens": len(words)},
                    },
                )

        self.url = f"http://127.0.0.1:{self._serve(Handler, port)}"


def cli_wrapper(bindir: Path, binary: str, python: Path, script: Path, *args: str) -> None:
    """`bindir/binary`: runs `python script ARGS... "$@"` (the script must lie where the sandbox can read it)."""
    words = " ".join(f"'{a}'" for a in (python, script, *args))
    (bindir / binary).write_text(f'#!/bin/sh\nexec {words} "$@"\n')
    (bindir / binary).chmod(0o755)


class ScriptedJudgeServer(LoopbackServer):
    """A scripted LLM judge on loopback, speaking OpenAI Chat Completions (`/v1/chat/completions`) and Anthropic
    Messages (`/v1/messages`): each answer is `reply(system, user)` (the system and the user text of the
    request); an int answers with that HTTP status instead. It records every request body in `requests` and its
    headers in `headers`, and reports usage as word counts. Use as `with ScriptedJudgeServer(reply) as judge:`;
    `judge.url` is `http://127.0.0.1:PORT/v1`."""

    def __init__(self, reply: Callable[[str, str], str | int], model: str = "scripted-judge"):
        from a2rl.httpjson import JSONRequestHandler

        self.reply, self.model = reply, model
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        outer = self

        class Handler(JSONRequestHandler):
            max_body = 64 << 20

            def do_POST(self) -> None:
                body = self.read_json()
                outer.requests.append(body)
                outer.headers.append({k.lower(): v for k, v in self.headers.items()})
                msgs = body.get("messages") or []
                system = body.get("system") or "".join(m["content"] for m in msgs if m["role"] == "system")
                user = "".join(m["content"] for m in msgs if m["role"] == "user")
                text = outer.reply(system, user)
                if isinstance(text, int):
                    return self.send_json(text, {"error": {"message": "scripted failure"}})
                tin, tout = len((system + user).split()), len(text.split())
                if self.path == "/v1/chat/completions":
                    return self.send_json(
                        200,
                        {
                            "id": "chatcmpl-1",
                            "object": "chat.completion",
                            "model": outer.model,
                            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}}],
                            "usage": {"prompt_tokens": tin, "completion_tokens": tout},
                        },
                    )
                if self.path == "/v1/messages":
                    return self.send_json(
                        200,
                        {
                            "id": "msg_1",
                            "type": "message",
                            "model": outer.model,
                            "content": [{"type": "text", "text": text}],
                            "usage": {"input_tokens": tin, "output_tokens": tout},
                        },
                    )
                self.send_json(404, {"error": "no route"})

        # a short poll: shutdown() waits for it, and tests start a server per case
        self.url = f"http://127.0.0.1:{self._serve(Handler, poll_s=0.05)}/v1"


def ledger_entry(
    run_id: str, seq: int, score: float | None, *, task: str, protocol: str = "paper", at: float | None = None, **kw
) -> LedgerEntry:
    """A graded entry as the grader writes it: scored, or invalid where `score` is None; submitted, claimed and
    graded at `at` (default: `seq`)."""
    at = seq if at is None else at
    return LedgerEntry(
        submission_id=f"{run_id}.{seq:04d}",
        run_id=run_id,
        seq=seq,
        submitted_at=at,
        claimed_at=at,
        graded_at=at,
        status="scored" if score is not None else "invalid",
        score=score,
        model_path="m",
        task=task,
        protocol=protocol,
        evaluator_version=1,
        grader="g",
        attempt=1,
        **kw,
    )
