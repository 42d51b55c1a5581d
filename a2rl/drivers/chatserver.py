"""The server of a local transformers model: the offline judge of judge-based tasks (OpenAI Chat Completions on
loopback, inside the grader) and the CPU backend of local driver LLMs (see server.py), which answers every agent
CLI in its own wire protocol (protocols.py: Anthropic Messages, OpenAI Responses and Chat Completions, Gemini),
tool calls included (toolcalls.py). Decoding is always greedy; every response carries the served name (and a
chat completion a weights fingerprint), so a verdict or a transcript says which model produced it.
"""

from __future__ import annotations

import hmac
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

from a2rl.httpjson import BadRequest as HTTPBadRequest, JSONRequestHandler, running
from a2rl.grading.judge import MAX_TOP_LOGPROBS, chat_prompt
from a2rl.drivers import protocols, toolcalls

log = logging.getLogger("a2rl.chatserver")


class BadRequest(ValueError):
    """A request the server refuses with HTTP 400."""


@lru_cache(maxsize=8)
def _fingerprint(model_dir: Path, stamp: tuple[tuple[str, int, int], ...]) -> str:
    """The judge's weights hash; cached by file stamps since a long-lived grader serves the same judge often."""
    from a2rl.spec.models import weights_hash

    return "wh-" + weights_hash(model_dir)[:16]


class LocalChatModel:
    """Chat completions from a2rl.grading.inference.Generator, one request at a time: the model is not thread-safe,
    2 CPU cores gain nothing from interleaving, and a request's result never depends on its neighbours
    (deterministic scores). Decoding is always greedy, whatever the request asks."""

    def __init__(self, model_dir: Path, model_id: str | None = None, fit_prompt: bool = False,
                 max_output: int | None = None):
        """fit_prompt: a prompt longer than the model's context keeps its end (a driver: agent CLIs send system
        prompts larger than a small model's context); without it (a judge) such a request is refused.
        max_output: a cap on the tokens generated for a driver request, whatever it asks (CLIs ask for 32k)."""
        from a2rl.grading.inference import Generator, pick_device

        model_dir = Path(model_dir).resolve()
        # the grader's transformers backend: on its GPU in bf16 when it has one, else on CPU in fp32
        self.generator = Generator.load(model_dir, device=pick_device())
        self.model_id = model_id or model_dir.name
        stamp = tuple((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in sorted(model_dir.glob("*.safetensors")))
        self.fingerprint = _fingerprint(model_dir, stamp)
        self.context = int(getattr(self.generator.model.config, "max_position_embeddings", 4096))
        self.fit_prompt, self.max_output = fit_prompt, max_output
        self._lock = threading.Lock()
        self._count = 0

    def card(self) -> dict[str, Any]:
        return {"id": self.model_id, "object": "model", "created": 0, "owned_by": "a2rl"}

    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        messages = body.get("messages")
        if not (isinstance(messages, list) and messages and all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                for m in messages)):
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
        with self._lock:
            self._count += 1
            text, finish, logprobs, usage = self._generate(chat_prompt(self.generator.tokenizer, messages),
                                                           max_tokens, stops, top)
            n = self._count
        choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text},
                                  "finish_reason": finish}
        if top is not None:
            choice["logprobs"] = {"content": logprobs}
        return {"id": f"chatcmpl-{n}", "object": "chat.completion", "created": int(time.time()),
                "model": self.model_id, "system_fingerprint": self.fingerprint, "choices": [choice], "usage": usage}

    def respond(self, req: protocols.Request) -> protocols.Reply:
        """A neutral request's reply: its conversation and tools on the chat template, the model's tool calls
        read back (MalformedToolCall where one cannot be carried out)."""
        max_tokens = req.max_tokens or 512
        if not (isinstance(max_tokens, int) and max_tokens > 0):
            raise BadRequest("the maximum number of output tokens must be a positive integer")
        max_tokens = min(max_tokens, self.max_output or max_tokens)
        with self._lock:
            self._count += 1
            text, _, _, usage = self._generate(toolcalls.chat_prompt(self.generator.tokenizer, req), max_tokens,
                                               [], None)
        text, calls = toolcalls.read_reply(text, req)
        return protocols.Reply(text, calls, protocols.Usage(usage["prompt_tokens"], usage["completion_tokens"]))

    def _generate(self, prompt: str, max_tokens: int, stops: list[str],
                  top: int | None) -> tuple[str, str, list[dict[str, Any]], dict[str, int]]:
        import torch
        from transformers import GenerationConfig, StoppingCriteriaList

        from a2rl.grading.inference import StopOnString, cut_at_stop

        tok, model = self.generator.tokenizer, self.generator.model
        # A chat template writes its own special tokens; adding BOS again would double it.
        enc = tok(prompt, return_tensors="pt", add_special_tokens=not tok.chat_template).to(model.device)
        prompt_len = enc["input_ids"].shape[1]
        if prompt_len >= self.context:
            if not self.fit_prompt:
                raise BadRequest(f"the prompt has {prompt_len} tokens; the model's context is {self.context}")
            keep = self.context - min(max_tokens, self.context // 2)
            log.info("prompt of %d tokens cut to its last %d (the model's context is %d)", prompt_len, keep,
                     self.context)
            enc = {k: v[:, -keep:] for k, v in enc.items()}
            prompt_len = keep
        config = GenerationConfig(max_new_tokens=min(max_tokens, self.context - prompt_len), do_sample=False,
                                  eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                                  return_dict_in_generate=True, output_logits=top is not None)
        criteria = StoppingCriteriaList([StopOnString(tok, stops, prompt_len)] if stops else [])
        with torch.inference_mode():
            out = model.generate(**enc, generation_config=config, stopping_criteria=criteria)
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
                logprobs.append({"token": tok.decode([token_id]), "logprob": lp[token_id].item(),
                                 "top_logprobs": [{"token": tok.decode([j]), "logprob": v}
                                                  for v, j in zip(best.values.tolist(), best.indices.tolist())]})
        usage = {"prompt_tokens": prompt_len, "completion_tokens": len(ids), "total_tokens": prompt_len + len(ids)}
        return text, "stop" if ended else "length", logprobs, usage


class _Server(ThreadingHTTPServer):
    def __init__(self, backend: LocalChatModel, api_key: str | None, host: str, port: int):
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
            req = protocols.parse_request(r, body)
            protocols.send(self, protocols.render(req, self.server.backend.respond(req), self.server.backend.model_id))
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
        given = [self.headers.get("Authorization", "").removeprefix("Bearer "), self.headers.get("x-api-key", ""),
                 self.headers.get("x-goog-api-key", "")]
        if any(hmac.compare_digest(g, expected) for g in given):
            return True
        self._error(401, "missing or wrong API key", protocol)
        return False

    def _error(self, status: int, message: str, protocol: protocols.Protocol = "chat") -> None:
        protocols.send(self, protocols.render_error(protocol, status, message))


@contextmanager
def serve_local_model(model_dir: Path, *, api_key: str | None = None, model_id: str | None = None,
                      host: str = "127.0.0.1", port: int = 0, fit_prompt: bool = False,
                      max_output: int | None = None) -> Iterator[str]:
    """Serve the model at model_dir for the duration of the block (a random port by default); yields the base
    URL (`http://HOST:PORT/v1`). With api_key, requests must carry it (see _authorized): other users of the
    node (agents, for a judge) cannot use it. fit_prompt, max_output: see LocalChatModel."""
    with running(_Server(LocalChatModel(model_dir, model_id, fit_prompt, max_output), api_key, host, port)) as root:
        yield root + "/v1"
