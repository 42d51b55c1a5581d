"""A generation preset's chat_template_kwargs (Qwen3's enable_thinking) reach every chat prompt the grader builds,
on both backends. The tokenizer's template here reads `enable_thinking` as Qwen3's does: with it false, the
assistant turn opens with an empty think block. vLLM is driven through RecordingVLLM, a STAND-IN for vllm.LLM
(tests/fakes.py): it proves our plumbing, not vLLM."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from a2rl.grading.evaluate import evaluate_model
from a2rl.llm import inference, vllm_backend
from a2rl.llm.backends import BackendSettings, Engine
from a2rl.llm.chat import chat_prompt
from a2rl.spec.generation import get_preset
from a2rl.spec.tasks import get_task
from a2rl.tasklib.evaluator import load_evaluator
from a2rl.tasklib.pairwise import generate_answers
from a2rl.tasklib.prepare import ensure_prepared
from conftest import FIXTURES
from fakes import FakeGenerator, RecordingSamplingParams, RecordingVLLM

NO_THINK = "<think>\n\n</think>\n\n"
TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n"
    "{% if enable_thinking is defined and enable_thinking is false %}" + NO_THINK + "{% endif %}{% endif %}"
)
MESSAGES = [{"role": "user", "content": "What is 6*7?"}]


@pytest.fixture(scope="module")
def thinking_model(tiny_model, tmp_path_factory) -> Path:
    """The tiny model with a chat template that reads enable_thinking, and 4,096 positions (RoPE: no weights
    change), so GSM8K's 4-shot paper prompt fits its context and is generated from on every backend."""
    dest = tmp_path_factory.mktemp("m") / "model"
    shutil.copytree(tiny_model, dest)
    model_config = json.loads((dest / "config.json").read_text())
    (dest / "config.json").write_text(json.dumps({**model_config, "max_position_embeddings": 4096}))
    config = json.loads((dest / "tokenizer_config.json").read_text())
    (dest / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": TEMPLATE}))
    (dest / "chat_template.jinja").unlink(missing_ok=True)
    return dest


@pytest.fixture(scope="module")
def tokenizer(thinking_model):
    return AutoTokenizer.from_pretrained(thinking_model, local_files_only=True)


def test_chat_prompt_renders_the_template_with_the_kwargs(tokenizer):
    assert tokenizer.chat_template == TEMPLATE
    assert chat_prompt(tokenizer, MESSAGES, {"enable_thinking": False}).endswith("<|assistant|>\n" + NO_THINK)
    assert chat_prompt(tokenizer, MESSAGES).endswith("<|assistant|>\n")


@pytest.mark.parametrize("preset,marked", [("qwen3-nothinking", True), ("qwen3-thinking", False), ("greedy", False)])
def test_judge_and_paper_protocols_pass_the_presets_kwargs(tokenizer, tmp_path, preset, marked):
    """generate_answers (alpacaeval, localjudge) and the paper protocols of humaneval and gsm8k."""
    gen = FakeGenerator("x", tokenizer=tokenizer, preset=get_preset(preset))
    generate_answers(gen, ["Say hi."], max_new_tokens=4, batch_size=1)
    (tmp_path / "test.jsonl").write_text(
        json.dumps(
            {
                "question": "What is 6*7?",
                "answer": "#### 42",
                "prompt": "def f():\n",
                "task_id": "t",
                "test": "",
                "entry_point": "f",
            }
        )
        + "\n"
    )
    load_evaluator(get_task("gsm8k")).evaluate(gen, tmp_path, {"protocol": "paper"})
    load_evaluator(get_task("humaneval")).evaluate(gen, tmp_path, {"protocol": "paper"})
    assert len(gen.prompts) == 3
    assert all(p.endswith("<|assistant|>\n" + NO_THINK) == marked for p in gen.prompts)


@pytest.fixture
def gsm8k_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("data")
    ensure_prepared(get_task("gsm8k"), root, source=FIXTURES / "gsm8k")
    return root


@pytest.mark.parametrize("backend", ["transformers", "vllm"])
def test_the_graded_prompt_carries_the_kwargs_on_each_backend(backend, thinking_model, gsm8k_root, monkeypatch):
    """The daemon's path: evaluate_model with the engine of each backend and the model's preset."""
    prompts: list[str] = []
    if backend == "vllm":
        monkeypatch.setattr(RecordingVLLM, "instances", [])
        monkeypatch.setattr(vllm_backend, "vllm_api", lambda: (RecordingVLLM, RecordingSamplingParams))
        settings = BackendSettings("vllm", "cuda", 1, 0.9, None, None)
    else:
        real = inference.Generator.generate

        def recording(self, batch, **kwargs):
            prompts.extend(batch)
            return real(self, batch, **kwargs)

        monkeypatch.setattr(inference.Generator, "generate", recording)
        settings = BackendSettings("transformers", "cpu", 0, 0.9, None, None)
    evaluate_model(
        get_task("gsm8k"),
        thinking_model,
        thinking_model,
        data_root=gsm8k_root,
        protocol="paper",
        engine=Engine(settings),
        preset=get_preset("qwen3-nothinking"),
        options={"limit": 2, "max_new_tokens": 2},
    )
    if backend == "vllm":
        (llm,) = RecordingVLLM.instances
        calls = [c[1] for c in llm.calls if c[0] == "generate"]
        # chat-templated, so passed as token ids (no special tokens added twice)
        prompts = [llm.get_tokenizer().decode(p["prompt_token_ids"]) for batch in calls for p in batch]
    assert len(prompts) == 2 and all(p.endswith("<|assistant|>\n" + NO_THINK) for p in prompts)
