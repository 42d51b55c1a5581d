"""The local driver server on every wire protocol: a neutral request laid onto the model's chat template with
its tools, the model's tool calls read back (a malformed one is an API error, never a crashed server), and the
real Claude Code, Codex, Gemini CLI and OpenCode each completing a turn against the tiny model (trained to say
one sentence; the protocol holds), each on its stack's command line and local-driver settings. The CLIs come from
A2RL_AGENT_CLIS (tools/agents/install.sh)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.error import HTTPError
from urllib.request import Request as HTTPRequest
from urllib.request import urlopen

import pytest

from a2rl.drivers import protocols
from a2rl.drivers.chatserver import serve_local_model
from a2rl.drivers.protocols import Message, Request, Tool, ToolCall, ToolResult
from a2rl.drivers.toolcalls import MalformedToolCall, chat_prompt, read_reply, template_messages
from a2rl.spec.agents import agent_registry
from a2rl.spec.registry import HOME
from test_real_clis import clis_prefix

STACKS = HOME / "configs" / "agents"
BASH = Tool("Bash", "run a command", {"type": "object", "properties": {"command": {"type": "string"}}})
REQ = Request(
    "anthropic",
    "m",
    [
        Message("system", "Be brief."),
        Message("user", "list files"),
        Message("assistant", "ok", tool_calls=[ToolCall("t1", "Bash", {"command": "ls"})]),
        Message("tool", tool_results=[ToolResult("t1", "a.txt")]),
    ],
    [BASH],
)
BAD_CALL = '<tool_call>{"name": "Bash", "arguments": {oops}</tool_call>'


def test_reply_text_is_split_into_text_and_tool_calls():
    text, calls = read_reply('Sure.\n<tool_call>\n{"name": "Bash", "arguments": {"command": "ls"}}\n</tool_call>', REQ)
    assert text == "Sure." and [(c.name, c.arguments) for c in calls] == [("Bash", {"command": "ls"})]
    assert calls[0].id.startswith("call_")
    # arguments as a JSON string, as OpenAI's API carries them
    _, calls = read_reply('<tool_call>{"name": "Bash", "arguments": "{\\"command\\": \\"pwd\\"}"}</tool_call>', REQ)
    assert calls[0].arguments == {"command": "pwd"}
    assert read_reply("just words", REQ) == ("just words", [])


@pytest.mark.parametrize(
    "text, says",
    [
        (BAD_CALL, "not JSON"),
        ('<tool_call>{"name": "Bash", "arguments": {"command": "ls"}', "not JSON"),  # never closed, cut off
        ('<tool_call>{"arguments": {}}</tool_call>', "without a name"),
        (
            '<tool_call>{"name": "Rm", "arguments": {}}</tool_call>',
            "'Rm', which the request does not offer (offered: Bash)",
        ),
        ('<tool_call>{"name": "Bash", "arguments": [1]}</tool_call>', "arguments are not a JSON object"),
    ],
)
def test_malformed_tool_calls_are_refused(text, says):
    with pytest.raises(MalformedToolCall, match=says.replace("(", r"\(").replace(")", r"\)")):
        read_reply(text, REQ)


def test_conversation_on_a_template_without_tools():
    """The tiny model's template knows no tools: they are described in the system message, calls and results
    written into the text in the format read_reply reads."""
    msgs = template_messages(REQ, native_tools=False)
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user"]
    assert msgs[0]["content"].startswith("Be brief.\n\n# Tools") and '"name": "Bash"' in msgs[0]["content"]
    assert msgs[2]["content"] == 'ok\n<tool_call>\n{"name": "Bash", "arguments": {"command": "ls"}}\n</tool_call>'
    assert msgs[3]["content"] == "<tool_response>\na.txt\n</tool_response>"
    assert read_reply(msgs[2]["content"], REQ)[1][0].arguments == {"command": "ls"}  # the format round-trips
    native = template_messages(REQ, native_tools=True)
    assert native[0]["content"] == "Be brief." and native[3]["role"] == "tool"
    assert native[2]["tool_calls"][0]["function"] == {"name": "Bash", "arguments": {"command": "ls"}}


@pytest.mark.parametrize("name", ["claude", "codex", "gemini", "opencode", "openhands", "rdagent"])
def test_every_cli_stack_takes_a_local_driver_with_no_launcher_key(name):
    """Each stack that needs a driver points its CLI at the sweep's server and its key, so a local driver asks
    the launcher for no credential; the endpoint reaches the CLI where it reads it."""
    stack = agent_registry().get(name)
    assert stack.openai_compatible is not None and stack.missing_credentials({}, local_driver=True) == []
    driver, env = stack.openai_compatible.render(model="tiny", base_url="http://h:9/v1", api_key="K")
    assert "tiny" in driver and "K" in env.values() and any("http://h:9" in v for v in env.values())
    if name == "opencode":  # a provider declared in the config it reads from the environment
        config = json.loads(env["OPENCODE_CONFIG_CONTENT"])["provider"]["a2rl"]
        assert driver == "a2rl/tiny" and list(config["models"]) == ["tiny"]
        assert config["options"] == {"baseURL": "http://h:9/v1", "apiKey": "{env:OPENAI_API_KEY}"}


def test_prompt_on_the_tiny_models_template(tiny_model):
    from transformers import AutoTokenizer

    prompt = chat_prompt(AutoTokenizer.from_pretrained(tiny_model), REQ)
    assert prompt.startswith("<|system|>\nBe brief.\n\n# Tools") and prompt.endswith("<|assistant|>\n")


def _post(url: str, body: dict, headers: dict) -> tuple[int, bytes]:
    req = HTTPRequest(url, json.dumps(body).encode(), {"Content-Type": "application/json", **headers})
    try:
        with urlopen(req, timeout=600) as r:
            return r.status, r.read()
    except HTTPError as e:
        return e.code, e.read()


CASES = {  # protocol: (path, body, key header)
    "anthropic": (
        "/v1/messages?beta=true",
        {
            "model": "x",
            "max_tokens": 8,
            "stream": True,
            "system": "s " * 900,
            "tools": [{"name": "Bash", "input_schema": {"type": "object"}}],
            "messages": [{"role": "user", "content": "hi"}, {"role": "system", "content": "reminder"}],
        },
        lambda k: {"x-api-key": k},
    ),
    "responses": (
        "/v1/responses",
        {
            "model": "x",
            "stream": True,
            "input": "hi",
            "max_output_tokens": 8,
            "tools": [{"type": "function", "name": "shell", "parameters": {}}],
        },
        lambda k: {"Authorization": f"Bearer {k}"},
    ),
    "chat": (
        "/v1/chat/completions",
        {
            "model": "x",
            "stream": True,
            "max_tokens": 8,
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
        },
        lambda k: {"Authorization": f"Bearer {k}"},
    ),
    "gemini": (
        "/v1beta/models/x:streamGenerateContent?alt=sse",
        {"contents": [{"role": "user", "parts": [{"text": "hi"}]}], "generationConfig": {"maxOutputTokens": 8}},
        lambda k: {"x-goog-api-key": k},
    ),
}


def test_every_protocol_is_served_from_the_tiny_model(tiny_model):
    """Each protocol's streamed answer, with the served name and the model's token counts; a prompt longer
    than the tiny model's 512 positions keeps its end; a wrong key is refused in the protocol's own form."""
    with serve_local_model(tiny_model, api_key="k", model_id="tiny", fit_prompt=True, max_output=8) as url:
        root = url.removesuffix("/v1")
        for protocol, (path, body, key) in CASES.items():
            status, data = _post(root + path, body, key("k"))
            assert status == 200, (protocol, data)
            events = [d for _, d in protocols.sse_events(data) if d != "[DONE]"]
            if protocol == "anthropic":
                assert events[0]["message"]["model"] == "tiny" and events[-2]["usage"]["output_tokens"] == 8
                assert events[0]["message"]["usage"]["input_tokens"] == 512 - 8  # its end, leaving room for 8
            elif protocol == "responses":
                done = events[-1]["response"]
                assert done["model"] == "tiny" and done["usage"]["output_tokens"] == 8
            elif protocol == "chat":
                assert events[-1]["usage"]["completion_tokens"] == 8 and events[0]["model"] == "tiny"
            else:
                assert events[-1]["usageMetadata"]["candidatesTokenCount"] == 8
            status, data = _post(root + path, body, key("wrong"))
            assert status == 401 and b"missing or wrong API key" in data
        assert json.loads(_post(root + "/v1/messages", {"messages": "x"}, {"x-api-key": "k"})[1]) == {
            "type": "error",
            "error": {"type": "invalid_request_error", "message": "'messages' must be a list"},
        }


def tuned_model(tiny_model: Path, answer: str, out: Path, steps: int = 120) -> Path:
    """The tiny model trained for `steps` steps to answer any chat turn with `answer`: a real model whose words
    a test knows. Its contexts: random words of many lengths (a CLI's prompt reaches it cut to its end) and a
    plain request with a tool; the loss is on the answer only."""
    import random

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model)
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    rng, vocab = random.Random(0), "the a files list say hi run tool user system you please ok code".split()
    contexts = [chat_prompt(tok, Request("anthropic", "m", [Message("user", "hi")], [BASH]))]
    contexts += [
        f"<|user|>\n{' '.join(rng.choices(vocab, k=rng.randint(1, 150)))}<|eos|>\n<|assistant|>\n" for _ in range(7)
    ]
    ids_answer = tok(answer + "<|eos|>", add_special_tokens=False)["input_ids"]
    rows = [tok(c, add_special_tokens=False)["input_ids"][-250:] for c in contexts]
    width = max(len(r) for r in rows) + len(ids_answer)
    ids = torch.full((len(rows), width), tok.pad_token_id)
    labels = torch.full((len(rows), width), -100)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        n = len(r) + len(ids_answer)
        ids[i, :n] = torch.tensor(r + ids_answer)
        labels[i, len(r) : n] = torch.tensor(ids_answer)
        mask[i, :n] = 1
    torch.manual_seed(0)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(steps):
        model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
        opt.step()
        opt.zero_grad()
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def miscalling_model(tiny_model, tmp_path_factory) -> Path:
    """A model that answers with a broken tool call, which the server must refuse."""
    return tuned_model(tiny_model, BAD_CALL, tmp_path_factory.mktemp("miscalling"))


@pytest.fixture(scope="module")
def world_writable() -> Iterator[Path]:
    """A directory under /tmp that every user may write (mode 1777, as /tmp or a group project directory), holding
    a copy of the stacks' folder: where a researcher's checkout may lie. CLIs that refuse settings under such a
    parent (gemini) must still run, taking theirs from their HOME."""
    shared = Path(tempfile.mkdtemp(prefix="a2rl-ww-", dir="/tmp"))
    shared.chmod(0o1777)
    shutil.copytree(STACKS, shared / "a2rl" / "configs" / "agents")
    yield shared
    shutil.rmtree(shared)


def run_stack(name: str, url: str, key: str, home: Path, checkout: Path | None = None) -> subprocess.CompletedProcess:
    """The stack's CLI on its own command line, environment and local-driver settings (what a run with
    `drivers: [local:tiny]` starts), in `home`, with the files the run writes into its HOME; `checkout`: a copy
    of the checkout's stacks folder's parent to run from (default this checkout). A missing CLI fails naming the
    install command."""
    os.environ["A2RL_AGENT_CLIS"] = str(clis_prefix())  # where the stacks' `path` looks
    stack_dir = checkout / "configs" / "agents" if checkout else STACKS
    stack = agent_registry().get(name)
    driver, endpoint_env = stack.openai_compatible.render(model="tiny", base_url=url, api_key=key)
    env = stack.agent_env({"PATH": os.environ["PATH"], "HOME": str(home), **endpoint_env}, driver, stack_dir)
    if stack.find_cli(env) is None:
        pytest.fail(f"`{stack.command[0]}` is not installed under {clis_prefix()}: run tools/agents/install.sh {name}")
    home.mkdir(parents=True, exist_ok=True)
    (home / ".codex").mkdir(exist_ok=True)
    stack.write_home_files(home)
    argv = stack.argv(
        {}, workspace=home, driver=driver, seed=0, stack_dir=stack_dir, python=Path(sys.executable), env=env
    )
    argv[0] = stack.find_cli(env)
    return subprocess.run(
        argv, env=env, cwd=home, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=900
    )


def _events(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def _result(stdout: str) -> dict:
    return next(o for o in _events(stdout) if o.get("type") == "result")


HELLO = "Hello from the tiny model."


@pytest.fixture(scope="module")
def talking_driver(hello_model) -> Iterator[str]:
    """The local driver server, shared by the CLIs' turns, serving the tiny model trained to say HELLO (the
    untrained one writes only newlines, which Gemini CLI refuses as an empty response)."""
    with serve_local_model(hello_model, api_key="k", model_id="tiny", fit_prompt=True, max_output=16) as url:
        yield url


def _claude_turn(stdout: str) -> tuple[str, int]:
    result = _result(stdout)
    assert not result["is_error"] and result["usage"]["input_tokens"] > 0, result
    return result["result"], result["usage"]["output_tokens"]


def _codex_turn(stdout: str) -> tuple[str, int]:
    events = _events(stdout)
    # (its Responses WebSocket attempts fail against the HTTP/1.0 server, as `error` events, before it falls
    # back to HTTP; the turn itself must not fail)
    assert not [e for e in events if e["type"] == "turn.failed"], events
    done = [e for e in events if e["type"] == "turn.completed"]
    texts = [
        e["item"]["text"] for e in events if e["type"] == "item.completed" and e["item"]["type"] == "agent_message"
    ]
    return "".join(texts), done[0]["usage"]["output_tokens"]


def _gemini_turn(stdout: str) -> tuple[str, int]:
    doc = json.loads(stdout[stdout.index("{") :])
    assert "error" not in doc, doc["error"]
    return doc["response"], doc["stats"]["models"]["tiny"]["tokens"]["candidates"]


def _opencode_turn(stdout: str) -> tuple[str, int]:
    events = _events(stdout)
    assert not [e for e in events if e["type"] == "error"], events
    texts = [e["part"]["text"] for e in events if e["type"] == "text"]
    return "".join(texts), sum(e["part"]["tokens"]["output"] for e in events if e["type"] == "step_finish")


TURNS = {"claude": _claude_turn, "codex": _codex_turn, "gemini": _gemini_turn, "opencode": _opencode_turn}


@pytest.mark.slow  # real CLI turns on the tiny model on CPU
@pytest.mark.parametrize("name", sorted(TURNS))
def test_real_cli_completes_a_turn_on_the_local_driver(talking_driver, world_writable, tmp_path, name):
    """Each real CLI, on its stack's command line and local-driver settings, completes a turn whose words are
    the served model's, in its own protocol (claude: Anthropic Messages, codex: Responses, gemini: Gemini,
    opencode: Chat Completions), run from a checkout under a world-writable directory."""
    proc = run_stack(name, talking_driver, "k", tmp_path / name, checkout=world_writable / "a2rl")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    text, output_tokens = TURNS[name](proc.stdout)
    assert text.strip() == HELLO and output_tokens > 0, proc.stdout[-3000:]


@pytest.mark.slow  # trains the tiny model, then a real CLI turn
def test_a_malformed_tool_call_is_an_error_the_cli_sees(miscalling_model, tmp_path):
    with serve_local_model(miscalling_model, api_key="k", model_id="tiny", fit_prompt=True, max_output=40) as url:
        root = url.removesuffix("/v1")
        status, data = _post(
            root + "/v1/messages",
            {
                "model": "x",
                "max_tokens": 40,
                "messages": [{"role": "user", "content": "hi"}],
                "tools": [{"name": "Bash", "input_schema": {}}],
            },
            {"x-api-key": "k"},
        )
        assert status == 422 and json.loads(data)["error"]["message"].startswith(
            "malformed tool call: the model wrote a tool call that is not JSON"
        ), data
        proc = run_stack("claude", url, "k", tmp_path / "claude")
        result = _result(proc.stdout)
        assert result["is_error"] and "422" in result["result"] and "malformed tool call" in result["result"], (
            proc.stdout[-3000:]
        )
        with urlopen(HTTPRequest(url + "/models", headers={"Authorization": "Bearer k"}), timeout=60) as r:
            assert json.loads(r.read())["data"][0]["id"] == "tiny"  # the server still answers
