"""Resources checked at launch: parameters x dtype from the safetensors headers, a grader or run shape that cannot
hold the model refused with the field to change, and the default grader memory following the model size.

The 7B-shaped model is a safetensors file with Qwen2.5-7B-Instruct's tensor names and shapes whose data section is
a sparse hole: the check reads headers only, so it costs no disk."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from a2rl.errors import SpecError
from a2rl.spec.sizing import grader_mem_gb, memory_need, shape_problems
from a2rl.spec.sweep import load_sweep
from a2rl.store.modeldirs import check_shapes
from a2rl.weights import parameter_count
from conftest import a2rl, write_sweep

QWEN25_7B = dict(vocab=152064, hidden=3584, inter=18944, layers=28, kv=512)
QWEN25_7B_PARAMS = 7_615_616_512  # its model card: 7.61B


def shaped_model(dest: Path, vocab: int, hidden: int, inter: int, layers: int, kv: int) -> Path:
    shapes = {
        "model.embed_tokens.weight": [vocab, hidden],
        "lm_head.weight": [vocab, hidden],
        "model.norm.weight": [hidden],
    }
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes |= {
            p + "self_attn.q_proj.weight": [hidden, hidden],
            p + "self_attn.q_proj.bias": [hidden],
            p + "self_attn.k_proj.weight": [kv, hidden],
            p + "self_attn.k_proj.bias": [kv],
            p + "self_attn.v_proj.weight": [kv, hidden],
            p + "self_attn.v_proj.bias": [kv],
            p + "self_attn.o_proj.weight": [hidden, hidden],
            p + "mlp.gate_proj.weight": [inter, hidden],
            p + "mlp.up_proj.weight": [inter, hidden],
            p + "mlp.down_proj.weight": [hidden, inter],
            p + "input_layernorm.weight": [hidden],
            p + "post_attention_layernorm.weight": [hidden],
        }
    header, offset = {}, 0
    for name, shape in shapes.items():
        size = math.prod(shape) * 2
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    dest.mkdir(parents=True)
    with open(dest / "model.safetensors", "wb") as f:
        f.write(len(raw).to_bytes(8, "little") + raw)
        f.truncate(8 + len(raw) + offset)  # a hole: the bytes are never written
    (dest / "config.json").write_text(json.dumps({"architectures": ["Qwen2ForCausalLM"]}))
    return dest


@pytest.fixture(scope="module")
def qwen7b(tmp_path_factory) -> Path:
    return shaped_model(tmp_path_factory.mktemp("m") / "Qwen2.5-7B-Instruct", **QWEN25_7B)


def test_parameters_from_headers(qwen7b, tiny_model):
    from transformers import AutoModelForCausalLM

    assert parameter_count(qwen7b) == QWEN25_7B_PARAMS
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    assert parameter_count(tiny_model) == sum(p.numel() for p in model.parameters())  # tied: counted once


def test_memory_need_by_device():
    gpu, cpu = memory_need(QWEN25_7B_PARAMS, 1), memory_need(QWEN25_7B_PARAMS, 0)
    assert round(gpu.gpu_gb, 1) == 17.0 and round(gpu.host_gb, 1) == 22.2  # bf16 x 1.2; 8 + bf16
    assert cpu.gpu_gb == 0 and round(cpu.host_gb, 1) == 34.8  # 0.75 + fp32 x 1.2


def spec_of(tmp_path: Path, model: Path, **fields):
    return load_sweep(write_sweep(tmp_path, models=[str(model)], **fields))


def grader(**g) -> dict:
    return {"grader": {"poll_s": 0.05, **g}}


@pytest.mark.parametrize(
    "fields,field",
    [
        (grader(gpus=1, gpu_mem_gb=16), "grader.gpus"),  # 17 GiB > 16 x 0.9
        (grader(gpus=0, mem_gb=8), "grader.mem_gb"),  # fp32 on CPU: 38 GiB
        (grader(gpus=1, mem_gb=16), "grader.mem_gb"),
        ({"resources": {"gpus": 1, "gpu_mem_gb": 12, "mem_gb": 64}}, "resources.gpus"),
        ({"resources": {"gpus": 0, "mem_gb": 16}}, "resources.mem_gb"),
    ],
)
def test_a_shape_that_cannot_hold_7b_is_refused_naming_the_field(tmp_path, qwen7b, fields, field):
    fields.setdefault("grader", {"gpus": 1})
    fields.setdefault("resources", {"gpus": 1, "mem_gb": 64})
    spec = spec_of(tmp_path, qwen7b, **fields)
    with pytest.raises(SpecError) as e:
        check_shapes(spec)
    assert [line.split(":")[0] for line in e.value.lines] == [field], e.value.lines


def test_shapes_that_hold_7b_pass_and_grader_memory_follows_the_model(tmp_path, qwen7b, tiny_model):
    spec = spec_of(tmp_path, qwen7b, grader={"gpus": 1}, resources={"gpus": 1, "mem_gb": 64})
    params = check_shapes(spec)
    assert grader_mem_gb(spec, params) == 23  # ceil(8 + 14.2)
    cpu = spec_of(tmp_path, qwen7b, grader={"gpus": 0}, resources={"gpus": 1, "mem_gb": 64})
    assert grader_mem_gb(cpu, check_shapes(cpu)) == 35  # ceil(34.8)
    tiny = spec_of(tmp_path, tiny_model)
    assert grader_mem_gb(tiny, check_shapes(tiny)) == 8  # the floor
    assert (
        shape_problems(
            spec_of(tmp_path, qwen7b, grader={"gpus": 1, "mem_gb": 30}, resources={"gpus": 1, "mem_gb": 64}), params
        )
        == []
    )


@pytest.mark.slow  # two CLI processes
def test_launch_refuses_before_submitting(tmp_path, qwen7b):
    sweep = write_sweep(
        tmp_path, models=[str(qwen7b)], grader={"gpus": 1, "gpu_mem_gb": 16}, resources={"gpus": 1, "mem_gb": 64}
    )
    dry = a2rl("launch", str(sweep), "--dry-run")
    assert (
        dry.returncode == 2
        and "error: grader.gpus: model 'Qwen2.5-7B-Instruct' (7.62B parameters) needs 17.0 GiB of GPU memory"
        in dry.stderr
    ), dry.stderr
    real = a2rl("launch", str(sweep), "--sweep-dir", str(tmp_path / "sd"))
    assert real.returncode == 2 and "raise grader.gpus" in real.stderr and "Traceback" not in real.stderr
    assert not list((tmp_path / "sd").glob("runs/*/status.json"))  # nothing submitted
