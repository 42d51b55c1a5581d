"""The server of a local model: the offline judge of judge-based tasks (a transformers model, OpenAI Chat
Completions on loopback, inside the grader) and local driver LLMs (see server.py: transformers on CPU, or a vLLM
server behind it, vllmclient.py), which answer every agent CLI in its own wire protocol (protocols.py:
Anthropic Messages, OpenAI Responses and Chat Completions, Gemini), tool calls included (toolcalls.py). Decoding is
always greedy; every response carries the served name (and a chat completion a weights fingerprint), so a verdict or a
transcript says which model produced it.
"""

from __future__ import annotations

import hmac
import itertools
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

from a2rl.drivers import protocols, toolcalls, wire_replies, wire_requests
from a2rl.httpjson import BadRequest as HTTPBadRequest
from a2rl.httpjson import JSONRequestHandler, running
from a2rl.llm.chat import MAX_TOP_LOGPROBS, chat_prompt

log = logging.getLogger("a2rl.chatserver")


class BadRequest(ValueError):
    """A request the server refuses with HTTP 400."""


@lru_cache(maxsize=8)
def _fingerprint(model_dir: Path, stamp: tuple[tuple[str, int, int], ...]) -> str:
    """The judge's weights hash; cached by file stamps since a long-lived grader serves the same judge often."""
    from a2rl.weights import weights_hash

    return "wh-" + weights_hash(model_dir)[:16]


class ChatModel:
    """What the server answers from: chat completions (the judge's, with logprobs and stop strings) and neutral
    protocol requests, each rendered on the model's chat template and fitted to its context here, then handed to
    `_generate` as token ids. Two generators: the transformers model in process (LocalChatModel) and a vLLM
    server over HTTP (vllmclient.VLLMChatModel), so every protocol reaches either the same way. Decoding is
    always greedy, whatever the request asks."""

    def __init__(
        self,
        tokenizer: Any,
        model_dir: Path,
        model_id: str | None,
        context: int,
        fit_prompt: bool,
        max_output: int | None,
    ):
        """fit_prompt: a prompt longer than the model's context keeps its end (a driver: agent CLIs send system
        prompts larger than a small model's context); without it (a judge) such a request is refused.
        max_output: a cap on the tokens generated for a driver request, whatever it asks (CLIs ask for 32k)."""
        model_dir = Path(model_dir).resolve()
        self.tokenizer = tokenizer
        self.model_id = model_id or model_dir.name
        stamp = tuple((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in sorted(model_dir.glob("*.safetensors")))
        self.fingerprint = _fingerprint(model_dir, stamp)
        self.context = context
        self.fit_prompt, self.max_output = fit_prompt, max_output
        self._ids = itertools.count(1)

    def card(self) -> dict[str, Any]:
        return {"id": self.model_id, "object": "model", "created": 0, "owned_by": "a2rl"}

    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        messages = body.get("messages")
        if not (
            isinstance(messages, list)
            and messages
            and all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                for m in messages
            )
        ):
            raise BadRequest("'messages' must be a non-empty list of {role, content} with string content")
        if body.get("n", 1) != 1:
            raise BadRequest("only n=1 is supported")
        max_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or 512
        stop = body.get("stop") or []
        stops = [stop] if isinstance(stop, str) else stop
        top = (body.get("top_logprobs") or 0) if body.get("logprobs") else None
        if not (isinstance(max_tokens, int) and max_tokens > 0):
            raise BadRequest("'max_tokens' must be a positive integer")
        if not (isinstance(stops, list) and all(isinstance(s, str) and s for s in stops)):
            raise BadRequest("'stop' must be a non-empty string or a list of them")
        if top is not None and not (isinstance(top, int) and 0 <= top <= MAX_TOP_LOGPROBS):
            raise BadRequest(f"'top_logprobs' must be an integer between 0 and {MAX_TOP_LOGPROBS}")
        n = next(self._ids)
        text, finish, logprobs, usage = self._run(chat_prompt(self.tokenizer, messages), max_tokens, stops, top)
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "finish_reason": finish,
        }
        if top is not None:
            choice["logprobs"] = {"content": logprobs}
        return {
            "id": f"chatcmpl-{n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model_id,
            "system_fingerprint": self.fingerprint,
            "choices": [choice],
            "usage": usage,
        }

    def respond(self, req: protocols.Request) -> protocols.Reply:
        """A neutral request's reply: its conversation and tools on the chat template, the model's tool calls
        read back (MalformedToolCall where one cannot be carried out)."""
        max_tokens = req.max_tokens or 512
        if not (isinstance(max_tokens, int) and max_tokens > 0):
            raise BadRequest("the maximum number of output tokens must be a positive integer")
        max_tokens = min(max_tokens, self.max_output or max_tokens)
        text, _, _, usage = self._run(toolcalls.chat_prompt(self.tokenizer, req), max_tokens, [], None)
        text, calls = toolcalls.read_reply(text, req)
        return protocols.Reply(text, calls, protocols.Usage(usage["prompt_tokens"], usage["completion_tokens"]))

    def _run(
        self, prompt: str, max_tokens: int, stops: list[str], top: int | None
    ) -> tuple[str, str, list[dict[str, Any]], dict[str, int]]:
        tok = self.tokenizer
        # A chat template writes its own special tokens; adding BOS again would double it.
        ids = tok(prompt, add_special_tokens=not tok.chat_template)["input_ids"]
        if len(ids) >= self.context:
            if not self.fit_prompt:
                raise BadRequest(f"the prompt has {len(ids)} tokens; the model's context is {self.context}")
            keep = self.context - min(max_tokens, self.context // 2)
            log.info("prompt of %d tokens cut to its last %d (the model's context is %d)", len(ids), keep, self.context)
            ids = ids[-keep:]
        return self._generate(ids, min(max_tokens, self.context - len(ids)), stops, top)

    def _generate(
        self, ids: list[int], max_tokens: int, stops: list[str], top: int | None
    ) -> tuple[str, str, list[dict[str, Any]], dict[str, int]]:
        """(text cut at the first stop string, "stop" or "length", per-token logprobs when top is set, usage)."""
        raise NotImplementedError


class LocalChatModel(ChatModel):
    """The transformers generator (a2rl.llm.inference.Generator) in process, one request at a time: the
    model is not thread-safe, 2 CPU cores gain nothing from interleaving, and a request's result never depends
    on its neighbours (deterministic scores)."""

    def __init__(
        self, model_dir: Path, model_id: str | None = None, fit_prompt: bool = False, max_output: int | None = None
    ):
        from a2rl.llm.inference import Generator, pick_device

        # the grader's transformers backend: on its GPU in bf16 when it has one, else on CPU in fp32
        self.generator = Generator.load(Path(model_dir).resolve(), device=pick_device())
        context = int(getattr(self.generator.model.config, "max_position_embeddings", 4096))
        super().__init__(self.generator.tokenizer, model_dir, model_id, context, fit_prompt, max_output)
        self._lock = threading.Lock()

    def _generate(
        self, ids: list[int], max_tokens: int, stops: list[str], top: int | None
    ) -> tuple[str, str, list[dict[str, Any]], dict[str, int]]:
        import torch
        from transformers import GenerationConfig, StoppingCriteriaList

        from a2rl.llm.inference import StopOnString
        from a2rl.llm.stops import cut_at_stop

        tok, model = self.tokenizer, self.generator.model
        prompt_len = len(ids)
        enc = torch.tensor([ids], device=model.device)
        config = GenerationConfig(
            max_new_tokens=max_tokens,
            do_sample=False,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
            return_dict_in_generate=True,
            output_logits=top is not None,
        )
        criteria = StoppingCriteriaList([StopOnString(tok, stops, prompt_len)] if stops else [])
        with self._lock, torch.inference_mode():
            out = model.generate(
                enc, attention_mask=torch.ones_like(enc), generation_config=config, stopping_criteria=criteria
            )
        ids = out.sequences[0, prompt_len:].tolist()
        ended = bool(ids) and ids[-1] == tok.eos_token_id
        if ended:
            ids = ids[:-1]
        text = tok.decode(ids, skip_special_tokens=True)
        if (cut := cut_at_stop(text, stops)) != text:
            text, ended = cut, True
        logprobs = []
        if top is not None:  # tokens of a matched stop string are included: the client sees what was generated
            for i, token_id in enumerate(ids):
                lp = out.logits[i][0].float().log_softmax(-1)
                best = lp.topk(top)
                logprobs.append(
                    {
                        "token": tok.decode([token_id]),
                        "logprob": lp[token_id].item(),
                        "top_logprobs": [
                            {"token": tok.decode([j]), "logprob": v}
                            for v, j in zip(best.values.tolist(), best.indices.tolist())
                        ],
                    }
                )
        usage = {"prompt_tokens": prompt_len, "completion_tokens": len(ids), "total_tokens": prompt_len + len(ids)}
        return text, "stop" if ended else "length", logprobs, usage


class _Server(ThreadingHTTPServer):
    def __init__(self, backend: ChatModel, api_key: str | None, host: str, port: int):
        super().__init__((host, port), _Handler)
        self.backend, self.api_key = backend, api_key


class _Handler(JSONRequestHandler):
    server: _Server
    max_body = 64 << 20  # an agent CLI's request carries its whole conversation and tool schemas

    def do_GET(self) -> None:
        if not self._authorized():
            return
        card = self.server.backend.card()
        if self.path.rstrip("/") == "/v1/models":
            self.send_json(200, {"object": "list", "data": [card]})
        elif self.path == f"/v1/models/{card['id']}":
            self.send_json(200, card)
        else:
            self._error(404, f"no route {self.path}")

    def do_POST(self) -> None:
        r = protocols.route("POST", self.path)
        protocol = r.protocol if r else "chat"
        if not self._authorized(protocol):
            return
        if r is None:
            return self._error(404, f"no route {self.path}", protocol)
        try:
            body = self.read_json()
            if not isinstance(body, dict):
                raise BadRequest("the body must be a JSON object")
            if protocol == "chat" and not body.get("tools") and not body.get("stream"):
                # plain chat completions (the judge's) keep logprobs, stop strings and the weights fingerprint
                self.send_json(200, self.server.backend.complete(body))
                return
            req = wire_requests.parse_request(r, body)
            protocols.send(
                self, wire_replies.render(req, self.server.backend.respond(req), self.server.backend.model_id)
            )
        except HTTPBadRequest as e:
            self._error(e.status, str(e), protocol)
        except (BadRequest, protocols.ProtocolError) as e:
            self._error(400, str(e), protocol)
        except toolcalls.MalformedToolCall as e:
            # not retried by the CLIs (a 5xx would be, and greedy decoding writes the same call again)
            self._error(422, f"malformed tool call: {e}", protocol)
        except Exception as e:  # noqa: BLE001 - a failed generation is the server's error, reported as such
            log.exception("local model failed on a request")
            self._error(500, f"{type(e).__name__}: {e}", protocol)

    def _authorized(self, protocol: protocols.Protocol = "chat") -> bool:
        """The key as each protocol's clients send it: a bearer token (OpenAI), `x-api-key` (Anthropic) or
        `x-goog-api-key` (Gemini)."""
        expected = self.server.api_key
        if expected is None:
            return True
        given = [
            self.headers.get("Authorization", "").removeprefix("Bearer "),
            self.headers.get("x-api-key", ""),
            self.headers.get("x-goog-api-key", ""),
        ]
        if any(hmac.compare_digest(g, expected) for g in given):
            return True
        self._error(401, "missing or wrong API key", protocol)
        return False

    def _error(self, status: int, message: str, protocol: protocols.Protocol = "chat") -> None:
        protocols.send(self, wire_replies.render_error(protocol, status, message))


@contextmanager
def serve(backend: ChatModel, *, api_key: str | None = None, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Serve `backend` on every protocol for the duration of the block (a random port by default); yields the
    base URL (`http://HOST:PORT/v1`). With api_key, requests must carry it (see _authorized): other users of
    the node (agents, for a judge) cannot use it."""
    with running(_Server(backend, api_key, host, port)) as root:
        yield root + "/v1"


@contextmanager
def serve_local_model(
    model_dir: Path,
    *,
    api_key: str | None = None,
    model_id: str | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    fit_prompt: bool = False,
    max_output: int | None = None,
) -> Iterator[str]:
    """`serve` the transformers model at model_dir. fit_prompt, max_output: see ChatModel."""
    with serve(
        LocalChatModel(model_dir, model_id, fit_prompt, max_output), api_key=api_key, host=host, port=port
    ) as url:
        yield url
