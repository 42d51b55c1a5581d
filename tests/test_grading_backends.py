"""The grader's backends: which one is chosen, and when the one engine of a grader process is reused (weights
reloaded) or started afresh. vLLM is driven through RecordingVLLM, a STAND-IN for vllm.LLM (tests/fakes.py): it
proves a2rl's plumbing, not vLLM. The transformers backend is the real one, on CPU."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from a2rl.errors import InfraError
from a2rl.llm import vllm_backend
from a2rl.llm.backends import BackendSettings, Engine, engine_key, select_backend
from a2rl.llm.inference import Generator
from a2rl.spec.generation import get_preset
from fakes import RecordingSamplingParams, RecordingVLLM

PROMPTS = ["Question: Tom has 3 apples. How many?\nAnswer:", "Question: 1 + 2 =\nAnswer:"]


def copy_model(
    base: Path,
    dest: Path,
    *,
    bump: float = 0.0,
    dtype: torch.dtype | None = None,
    config: dict | None = None,
    tokenizer_extra: dict | None = None,
) -> Path:
    """A copy of `base` with its weights shifted by `bump` (or cast to `dtype`), config.json fields and
    tokenizer_config.json fields changed."""
    shutil.copytree(base, dest)
    for f in dest.glob("*.safetensors"):
        tensors = load_file(str(f))
        save_file(
            {k: (v + bump).to(dtype or v.dtype).contiguous() for k, v in tensors.items()},
            str(f),
            metadata={"format": "pt"},
        )
    for name, extra in (("config.json", config), ("tokenizer_config.json", tokenizer_extra)):
        if extra:
            data = json.loads((dest / name).read_text())
            (dest / name).write_text(json.dumps({**data, **extra}))
    return dest


@pytest.mark.parametrize(
    "choice,gpus,vllm,expected",
    [
        ("auto", 1, True, "vllm"),
        ("auto", 0, True, "transformers"),  # no GPU visible
        ("auto", 2, False, "transformers"),  # vllm does not import
        ("transformers", 1, True, "transformers"),
        ("vllm", 4, True, "vllm"),
        ("vllm", 0, True, "vllm"),  # vLLM's CPU build (tests/test_vllm_real.py runs it)
    ],
)
def test_backend_selection(choice, gpus, vllm, expected):
    assert select_backend(choice, gpus=gpus, vllm_available=vllm) == expected


@pytest.mark.parametrize("gpus", [0, 1])
def test_explicit_vllm_without_vllm_is_an_infrastructure_error(gpus):
    with pytest.raises(InfraError, match="vllm is not installed in the grader's interpreter"):
        select_backend("vllm", gpus=gpus, vllm_available=False)


@pytest.mark.parametrize(
    "version,ok",
    [("0.32.0", True), ("0.32.1", True), ("0.32.0+cpu", True), ("0.31.9", False), ("0.33.0", False), ("1.0.0", False)],
)
def test_the_supported_vllm_range_is_checked_in_one_place(version, ok):
    low, high = vllm_backend.SUPPORTED_VLLM
    if ok:
        assert vllm_backend.check_vllm_version(version) == version
    else:
        with pytest.raises(InfraError, match=rf"vLLM {version} is installed; a2rl supports vLLM >={low},<{high}"):
            vllm_backend.check_vllm_version(version)


def test_engine_key_tells_apart_what_needs_a_new_engine(tmp_path, tiny_model):
    base = engine_key(tiny_model, tiny_model)
    assert engine_key(copy_model(tiny_model, tmp_path / "w", bump=0.5), tiny_model) == base
    assert (
        engine_key(
            copy_model(tiny_model, tmp_path / "noise", config={"use_cache": False, "transformers_version": "x"}),
            tiny_model,
        )
        == base
    )  # fields that do not change the network
    arch = engine_key(copy_model(tiny_model, tmp_path / "a", config={"rms_norm_eps": 1e-3}), tiny_model)
    dtype = engine_key(copy_model(tiny_model, tmp_path / "d", dtype=torch.bfloat16), tiny_model)
    tok = engine_key(copy_model(tiny_model, tmp_path / "t", tokenizer_extra={"model_max_length": 99}), tiny_model)
    assert arch.architecture != base.architecture and dtype.layout != base.layout and tok.tokenizer != base.tokenizer


@pytest.fixture
def recording_vllm(monkeypatch):
    """vllm_backend's LLM and SamplingParams replaced by the recording stand-ins."""
    monkeypatch.setattr(RecordingVLLM, "instances", [])
    monkeypatch.setattr(vllm_backend, "vllm_api", lambda: (RecordingVLLM, RecordingSamplingParams))
    return RecordingVLLM.instances


VLLM_SETTINGS = BackendSettings("vllm", "cuda", 2, 0.85, 4096, None)


def test_vllm_engine_reused_for_same_architecture_new_for_another(tmp_path, tiny_model, recording_vllm):
    engine = Engine(VLLM_SETTINGS)
    greedy = get_preset()
    first = engine.get(tiny_model, tiny_model, greedy)
    (llm,) = recording_vllm
    assert llm.kwargs | {"model": None, "tokenizer": None} == {
        "model": None,
        "tokenizer": None,
        "tensor_parallel_size": 2,
        "gpu_memory_utilization": 0.85,
        "max_model_len": 4096,
        "enforce_eager": False,
        "dtype": "bfloat16",
        "trust_remote_code": False,
        "seed": 0,
        "load_format": "safetensors",
    }
    assert llm.kwargs["model"] == str(tiny_model)

    trained = copy_model(tiny_model, tmp_path / "trained", bump=0.25)
    assert engine.get(trained, tiny_model, greedy) is first and len(recording_vllm) == 1
    assert llm.calls == [
        ("collective_rpc", "reload_weights", (), {"weights_path": str(trained)}),
        ("reset_prefix_cache",),
    ]
    assert engine.last == "reloaded"

    other = copy_model(tiny_model, tmp_path / "other", config={"rms_norm_eps": 1e-3})
    assert engine.get(other, tiny_model, greedy) is not first
    assert len(recording_vllm) == 2 and recording_vllm[1].kwargs["model"] == str(other)
    assert (engine.starts, engine.reloads) == (2, 1) and engine.last == "started"
    assert recording_vllm[0].calls[-1] == ("shutdown",)  # the old engine shut down before the new one


def test_grader_enforce_eager_reaches_vllm_and_the_grading_key_only_when_set(tiny_model, recording_vllm, monkeypatch):
    from a2rl.llm import backends
    from a2rl.llm.backends import resolve_settings
    from a2rl.spec.sweep import GraderSettings

    monkeypatch.setattr(backends, "vllm_installed", lambda: True)
    plain = resolve_settings(GraderSettings(backend="vllm"))
    eager = resolve_settings(GraderSettings(backend="vllm", enforce_eager=True))
    assert "enforce_eager" not in plain.record()  # grading keys from before the option stay valid
    assert eager.record() == {**plain.record(), "enforce_eager": True}
    Engine(eager).get(tiny_model, tiny_model, get_preset())
    assert recording_vllm[0].kwargs["enforce_eager"] is True


def test_vllm_engine_new_for_another_dtype_tokenizer_or_preset(tmp_path, tiny_model, recording_vllm):
    engine = Engine(VLLM_SETTINGS)
    engine.get(tiny_model, tiny_model, get_preset())
    engine.get(copy_model(tiny_model, tmp_path / "bf16", dtype=torch.bfloat16), tiny_model, get_preset())
    engine.get(
        copy_model(tiny_model, tmp_path / "tok", tokenizer_extra={"model_max_length": 99}), tiny_model, get_preset()
    )
    engine.get(tiny_model, tiny_model, get_preset("qwen3-thinking"))
    assert len(recording_vllm) == 4 and engine.reloads == 0
    assert not any(c[0] == "collective_rpc" for llm in recording_vllm for c in llm.calls)


def test_vllm_generate_is_greedy_with_stops_and_cut(tiny_model, recording_vllm):
    gen = Engine(VLLM_SETTINGS).get(tiny_model, tiny_model, get_preset())
    assert gen.generate(PROMPTS, max_new_tokens=7, stop=["\n"]) == [" 8", " 6"]
    ((_, prompts, params),) = [c for c in recording_vllm[0].calls if c[0] == "generate"]
    assert prompts == PROMPTS and params == {"max_tokens": 7, "stop": ["\n"], "temperature": 0.0}
    sampled = Engine(VLLM_SETTINGS).get(tiny_model, tiny_model, get_preset("qwen3-thinking"))
    sampled.generate(PROMPTS, max_new_tokens=7, stop=None)
    assert recording_vllm[1].calls[-1][2] == {
        "max_tokens": 7,
        "stop": [],
        "temperature": 0.6,
        "top_p": 0.95,
        "top_k": 20,
        "seed": 0,
    }


def test_failed_reload_drops_the_engine_and_loads_fresh(tmp_path, tiny_model, recording_vllm, monkeypatch):
    engine = Engine(VLLM_SETTINGS)
    first = engine.get(tiny_model, tiny_model, get_preset())

    def broken(*a, **k):
        raise RuntimeError("worker died")

    llm = first.llm
    monkeypatch.setattr(llm, "collective_rpc", broken)
    second = engine.get(copy_model(tiny_model, tmp_path / "w", bump=0.1), tiny_model, get_preset())
    assert second is not first and engine.counts() == {"starts": 2, "reloads": 0, "reload_failures": 1}
    assert engine.last == "started" and llm.calls[-1] == ("shutdown",) and first.llm is None


@pytest.mark.slow  # decodes with the tiny model a few times
def test_transformers_reload_equals_a_fresh_load(tmp_path, tiny_model):
    """Same scores either way: the reused CPU engine with reloaded weights generates exactly what a fresh load of
    the submission does (greedy), and it really holds the new weights."""
    trained = copy_model(tiny_model, tmp_path / "trained", bump=0.3)
    engine = Engine(BackendSettings("transformers", "cpu", 0, 0.9, None, None))
    first = engine.get(tiny_model, tiny_model, get_preset())
    before = first.generate(PROMPTS, max_new_tokens=8, stop=None)
    reused = engine.get(trained, tiny_model, get_preset())
    assert reused is first and (engine.starts, engine.reloads) == (1, 1)
    fresh = Generator.load(trained)
    after = reused.generate(PROMPTS, max_new_tokens=8, stop=None)
    assert after == fresh.generate(PROMPTS, max_new_tokens=8, stop=None) and after != before
    for (name, p), q in zip(reused.model.named_parameters(), fresh.model.parameters()):
        assert torch.equal(p, q), name
    assert reused.model.dtype == torch.float32  # fp32 on CPU
