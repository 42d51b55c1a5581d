import json
from pathlib import Path

import pytest

from a2rl.cli.main import main
from a2rl.store.tinymodel import MARKER, TINY_CONFIG, build_tiny_model
from a2rl.weights import config_parameter_count, parameter_count


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", seed=0)


def test_same_seed_gives_identical_weights_and_other_seed_differs(built, tmp_path):
    again = tmp_path / "again"
    again.mkdir()  # an empty directory is replaced like a missing one
    build_tiny_model(again, seed=0)
    assert (again / "model.safetensors").read_bytes() == (built / "model.safetensors").read_bytes()
    assert (again / "tokenizer.json").read_bytes() == (built / "tokenizer.json").read_bytes()
    other = build_tiny_model(tmp_path / "other", seed=1)
    assert (other / "model.safetensors").read_bytes() != (built / "model.safetensors").read_bytes()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "temp build dirs left behind"


def test_rebuild_is_a_no_op_and_seed_mismatch_raises(built, capsys):
    before = {p.name: p.stat().st_mtime_ns for p in built.iterdir()}
    assert main(["build-tiny-model", str(built), "--seed", "0"]) == 0
    assert capsys.readouterr().out.strip() == str(built)
    assert {p.name: p.stat().st_mtime_ns for p in built.iterdir()} == before
    assert json.loads((built / MARKER).read_text())["seed"] == 0
    with pytest.raises(ValueError):
        build_tiny_model(built, seed=1)


def test_reloads_with_auto_classes(built):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(built)
    model = AutoModelForCausalLM.from_pretrained(built)
    assert model.config.model_type == "llama"
    assert tok.padding_side == "left"
    assert None not in (tok.pad_token_id, tok.eos_token_id, tok.bos_token_id)
    assert len({tok.pad_token_id, tok.eos_token_id, tok.bos_token_id}) == 3
    assert "<|assistant|>" in tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    text = "Question: Tom has 7 apples. How many?\nAnswer: 12\n"
    ids = tok(text).input_ids
    assert tok.decode(ids) == text
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits
    assert logits.shape == (1, len(ids), len(tok))


def test_digits_are_split_individually(built):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(built)
    digit_tokens = [t for t in tok.tokenize("It costs 1234567890 and 42.") if any(c.isdigit() for c in t)]
    assert digit_tokens == list("1234567890") + ["4", "2"]


def test_the_recipes_size_before_building_is_the_built_models(built):
    """The capacity plan and `a2rl status` count a built-in model not built yet from TINY_CONFIG."""
    assert (
        parameter_count(built)
        == config_parameter_count(TINY_CONFIG)
        == config_parameter_count(json.loads((built / "config.json").read_text()))
    )
