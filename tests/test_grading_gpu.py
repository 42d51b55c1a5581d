"""Grading on a GPU (marker `gpu`; skipped where CUDA is absent). On any GPU machine, with the other gpu tests and
the benches: `bash tools/gpu-check.sh` (docs/development.md "GPU check").

The tiny model is first trained on arith for a few hundred steps on the GPU, so it answers part of the held-out split
and the score comparison means something. transformers on CUDA must give the score transformers on CPU gives (greedy
on arith; within 2% of the items, as bf16 may flip near-tied tokens); bf16 is used; several submissions in a row
reuse the loaded engine; vLLM the same where it is installed. These tests have NOT run on a GPU yet (none was at
hand where they were written).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from a2rl.grading.evaluate import evaluate_model
from a2rl.llm.backends import BackendSettings, Engine, vllm_installed
from a2rl.spec.generation import get_preset
from a2rl.spec.tasks import get_task
from a2rl.tasklib.prepare import ensure_prepared

pytestmark = [pytest.mark.gpu, pytest.mark.slow, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

CUDA = BackendSettings("transformers", "cuda", 1, 0.9, None, None)
VLLM = BackendSettings("vllm", "cuda", 1, 0.5, 512, None)


@pytest.fixture(scope="module")
def arith(tmp_path_factory):
    task = get_task("arith")
    root = tmp_path_factory.mktemp("data")
    ensure_prepared(task, root)
    return task, root


def train(base: Path, dest: Path, rows: list[dict], steps: int, seed: int) -> Path:
    """SFT of `base` on prompt + answer for `steps` steps on the GPU; saved in fp32 like the base."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(base, padding_side="right")
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32).cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(seed)
    texts = [f"{r['prompt']} {r['answer']}\n" for r in rows]
    for _ in range(steps):
        batch = [texts[i] for i in torch.randint(len(texts), (64,), generator=gen)]
        enc = tok(batch, return_tensors="pt", padding=True).to("cuda")
        labels = enc["input_ids"].masked_fill(enc["attention_mask"] == 0, -100)
        model(**enc, labels=labels).loss.backward()
        opt.step()
        opt.zero_grad()
    shutil.copytree(base, dest)
    model.save_pretrained(dest, safe_serialization=True)
    return dest


@pytest.fixture(scope="module")
def trained(arith, tiny_model, tmp_path_factory):
    task, root = arith
    rows = [json.loads(line) for line in (task.data(root).train_dir / "train.jsonl").read_text().splitlines()]
    out = tmp_path_factory.mktemp("trained")
    return [train(tiny_model, out / f"m{i}", rows, steps=300 + 100 * i, seed=i) for i in range(3)]


def scores(task, root, models, tokenizer_dir, engine=None) -> list[float]:
    return [
        evaluate_model(task, m, tokenizer_dir, data_root=root, engine=engine, preset=get_preset())[0] for m in models
    ]


def test_transformers_gpu_equals_cpu_on_arith_in_bf16_reusing_the_engine(arith, trained, tiny_model):
    task, root = arith
    cpu = scores(task, root, trained, tiny_model)
    assert max(cpu) > 0, "training did not teach the tiny model any arith: the comparison would be empty"
    engine = Engine(CUDA)
    gpu = scores(task, root, trained, tiny_model, engine)
    print(f"arith scores, transformers CPU fp32: {cpu}; CUDA bf16: {gpu}")
    # bf16 rounds the logits, so greedy decoding may flip where two tokens are all but tied: at most 2% of the
    # 200 held-out items each (the CPU run, in fp32, is the reference)
    assert all(abs(g - c) <= 2.0 for g, c in zip(gpu, cpu)), (gpu, cpu)  # scores are percentages
    assert engine.generator.model.dtype == torch.bfloat16 and engine.generator.model.device.type == "cuda"
    assert (engine.starts, engine.reloads) == (1, len(trained) - 1)


@pytest.mark.skipif(not vllm_installed(), reason="needs vllm")
def test_vllm_equals_cpu_on_arith_reusing_the_engine(arith, trained, tiny_model):
    task, root = arith
    engine = Engine(VLLM)
    assert scores(task, root, trained, tiny_model, engine) == scores(task, root, trained, tiny_model)
    assert (engine.starts, engine.reloads) == (1, len(trained) - 1)
