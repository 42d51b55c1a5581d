import shutil
from collections import Counter
from pathlib import Path

import pytest
import torch

from a2rl.llm.contextcap import ContextCap
from a2rl.llm.inference import Generator
from a2rl.store.tinymodel import build_tiny_model

# Mixed lengths, so batches really are left-padded.
PROMPTS = [
    f"Question: {name} has {n} {item}.{' How many?' * (n % 4)}\nAnswer:"
    for n, (name, item) in enumerate([("Tom", "apples"), ("Anna", "books"), ("Ben", "cards")] * 12)
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def generator(model_dir) -> Generator:
    gen = Generator.load(model_dir)
    # Random-init weights emit one repeated token; large random weights give varied, confident outputs.
    torch.manual_seed(0)
    with torch.no_grad():
        for p in gen.model.parameters():
            p.normal_(0, 0.3)
    return gen


@pytest.fixture(scope="module")
def unstopped(generator) -> list[str]:
    outputs = generator.generate(PROMPTS, max_new_tokens=12, batch_size=64, stop=None)
    assert len(set(outputs)) > len(PROMPTS) // 2, "outputs too uniform for the tests to mean anything"
    return outputs


@pytest.mark.slow  # > 5 s: decodes with the tiny model
def test_batched_equals_one_by_one(generator, unstopped):
    assert generator.generate(PROMPTS, max_new_tokens=12, batch_size=1, stop=None) == unstopped
    assert generator.generate(PROMPTS, max_new_tokens=12, batch_size=5, stop=None) == unstopped


@pytest.mark.slow  # > 5 s: decodes with the tiny model
def test_stop_string_cuts_output(generator, unstopped):
    stop = Counter("".join(unstopped)).most_common(1)[0][0]
    assert any(o.split(stop, 1)[0] != o for o in unstopped)
    expected = [o.split(stop, 1)[0] for o in unstopped]
    assert generator.generate(PROMPTS, max_new_tokens=12, stop=stop) == expected
    assert generator.generate(PROMPTS, max_new_tokens=12, stop=[stop]) == expected


def two_stops(unstopped: list[str]) -> tuple[str, str]:
    """The two most common three-character starts of the outputs: each ends a different set of rows early."""
    (a, _), (b, _) = Counter(o[:3] for o in unstopped).most_common(2)
    return a, b


def test_several_stop_strings_cut_at_the_earliest(generator, unstopped):
    stops = two_stops(unstopped)
    cuts = [min((o.find(s) for s in stops if s in o), default=len(o)) for o in unstopped]
    expected = [o[:i] for o, i in zip(unstopped, cuts)]
    # One batch with rows cut by either string, at different positions, and rows holding both: in one of the two
    # orders below the earliest is not the first listed.
    assert {o[i : i + 3] for o, i in zip(unstopped, cuts) if i < len(o)} == set(stops)
    assert len(set(cuts)) > 3 and any(all(s in o for s in stops) for o in unstopped)
    for order in (stops, stops[::-1]):
        assert generator.generate(PROMPTS, max_new_tokens=12, batch_size=64, stop=list(order)) == expected


def test_generation_stops_once_every_sequence_hit_the_stop(generator, unstopped):
    # A stop string that every chosen prompt produces within its first few characters.
    stop = Counter(c for o in unstopped for c in set(o[:3])).most_common(1)[0][0]
    chosen = [p for p, o in zip(PROMPTS, unstopped) if stop in o[:3]]
    assert len(chosen) >= 2
    assert count_forwards(generator, chosen, stop) <= 10  # one forward per new token: 40 without stopping


def count_forwards(generator, prompts, stop) -> int:
    """Model forwards while generating up to 40 new tokens for `prompts` in one batch."""
    forwards = []
    hook = generator.model.register_forward_hook(lambda *_: forwards.append(1))
    try:
        generator.generate(prompts, max_new_tokens=40, batch_size=len(prompts), stop=stop)
    finally:
        hook.remove()
    return len(forwards)


@pytest.mark.slow  # > 5 s: decodes with the tiny model
def test_generation_stops_once_every_sequence_hit_one_of_the_stops(generator, unstopped):
    stops = two_stops(unstopped)
    chosen = [p for p, o in zip(PROMPTS, unstopped) if o.startswith(stops)]
    # Each string alone leaves some rows running to max_new_tokens; together they end every row at once.
    assert [count_forwards(generator, chosen, s) for s in stops] == [40, 40]
    assert count_forwards(generator, chosen, stops) <= 5


def test_refuses_pickled_weights(model_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    for f in model_dir.iterdir():
        if f.name != "model.safetensors":
            shutil.copy(f, tmp_path / f.name)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")
    with pytest.raises(OSError, match="model.safetensors"):  # only safetensors weights load; a pickle never does
        Generator.load(tmp_path)


def test_tokenizer_falls_back_to_tokenizer_dir(model_dir, tmp_path):
    for f in ("config.json", "generation_config.json", "model.safetensors"):
        shutil.copy(model_dir / f, tmp_path / f)
    gen = Generator.load(tmp_path, tokenizer_dir=model_dir)
    assert gen.tokenizer.padding_side == "left"
    assert len(gen.generate(PROMPTS[:3], max_new_tokens=2)) == 3


def near_context(generator, room: int) -> str:
    """A prompt that leaves `room` positions of the model's context."""
    context = generator.config.max_position_embeddings
    words = "apple " * (context - room)
    while len(generator.tokenizer(words)["input_ids"]) > context - room:
        words = words[:-6]
    assert len(generator.tokenizer(words)["input_ids"]) == context - room
    return words


def sequence_lengths(generator, call) -> list[int]:
    """The positions of each model.generate output (prompt and new tokens) while `call()` runs."""
    seen, real = [], generator.model.generate

    def spy(*args, **kwargs):
        out = real(*args, **kwargs)
        seen.append(out.shape[1])
        return out

    generator.model.generate = spy
    try:
        call()
    finally:
        del generator.model.generate
    return seen


def test_generation_stops_at_the_models_context(generator):
    """The paper protocol's 8,192 new tokens for a prompt 12 positions short of the tiny model's 512: it stops at
    512, and the cap says so (what evaluate_model puts in the ledger entry)."""
    generator.context_cap = ContextCap()
    prompt = near_context(generator, 12)
    out = []
    assert sequence_lengths(
        generator, lambda: out.extend(generator.generate([prompt], max_new_tokens=8192, stop=None))
    ) == [512]
    assert out[0]
    assert generator.context_cap.record() == {
        "context": 512,
        "max_new_tokens": 8192,
        "capped": 1,
        "filled": 1,
        "no_room": 0,
    }


def test_each_prompt_of_a_batch_gets_its_own_room(generator, unstopped):
    """A short prompt beside one near the context: the long one stops at the context, the short one goes on to
    max_new_tokens, as it would alone; a prompt that fills the context gets "" without a forward."""
    generator.context_cap = ContextCap()
    long_prompt, full = near_context(generator, 5), near_context(generator, 0)
    together = generator.generate([PROMPTS[0], long_prompt, full], max_new_tokens=12, batch_size=3, stop=None)
    assert generator.context_cap.record() == {
        "context": 512,
        "max_new_tokens": 12,
        "capped": 2,
        "filled": 1,
        "no_room": 1,
    }
    assert together[0] == unstopped[0]  # 12 new tokens, as alone
    assert together[1] == generator.generate([long_prompt], max_new_tokens=5, stop=None)[0] and together[1]
    assert together[2] == ""


def test_the_cap_does_not_bite_inside_the_context(generator):
    generator.context_cap = ContextCap()
    generator.generate(PROMPTS[:4], max_new_tokens=12, stop=None)
    assert generator.context_cap.record() is None


def test_no_prompts_no_answers(generator):
    assert generator.generate([], max_new_tokens=8) == []
