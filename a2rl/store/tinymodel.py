"""Build a tiny random-init Llama + BPE tokenizer fully offline (no hub access on the cluster).

The model is the base checkpoint for CPU demos and tests. Same seed => byte-identical
model.safetensors, because the grader recognises unmodified copies of the base model by hash.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
from pathlib import Path

MARKER = ".a2rl-tiny-model"
# Bump when the recipe changes, so a stale directory is not mistaken for a current build.
RECIPE_VERSION = 1

BOS, EOS, PAD = "<|bos|>", "<|eos|>", "<|pad|>"
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}" + EOS + "\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
VOCAB_SIZE = 1024
MODEL_SHAPE = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "max_position_embeddings": 512,
}
# what its config.json says of its size (the tokenizer has exactly VOCAB_SIZE entries): counted before it is built
TINY_CONFIG = {**MODEL_SHAPE, "vocab_size": VOCAB_SIZE, "tie_word_embeddings": True}

# Generic everyday English so that word problems, instructions and chat turns tokenize into
# few pieces; byte-level BPE still encodes any text, this only affects efficiency.
_WORDS = """
the a an and or but if then so of to in on at by for with from into over under after before
is are was were be been has have had do does did will would can could should may must
how many much what which who whom whose where when why there here this that these those
it its he she they them their his her we our you your i me my not no yes more most less
left right each every some all both other another few several more fewer than total
has buys gives gets finds loses eats sells picks bakes makes collects receives shares takes
bought gave got found lost ate sold picked baked made collected received shared took had
Tom Anna Ben Lucy Sam Mia Leo Emma Max Zoe Jack Lily Noah Ella Omar Sara Ivan Nina Paul Rosa
apple apples orange oranges pear pears banana bananas cookie cookies cake cakes candy candies
marble marbles book books pencil pencils sticker stickers card cards ball balls toy toys
coin coins flower flowers shell shells egg eggs cup cups box boxes bag bags basket baskets
friend friends sister brother mother father teacher class school shop store market garden
morning afternoon evening day days week weeks year years today yesterday tomorrow
one two three four five six seven eight nine ten eleven twelve zero hundred thousand
add plus minus times divided equal equals sum difference product number numbers answer
question problem solve step result value count left over remain remaining altogether
first second last next new old big small good bad red blue green yellow white black
user assistant system please think reason explain write read say tell show give
"""
_PUNCT = [".", ",", "?", "!", ":", ";", "-", "+", "*", "/", "=", "(", ")", "'", '"']


def _corpus(n_lines: int = 20000) -> list[str]:
    """Deterministic pseudo-sentences mixing the word list, numbers and punctuation."""
    words = _WORDS.split()
    rng = random.Random(1234)
    lines = []
    for _ in range(n_lines):
        parts = []
        for _ in range(rng.randint(4, 16)):
            r = rng.random()
            if r < 0.7:
                word = rng.choice(words)
                # Sentence-initial words ("How", "Answer") are capitalized in real text.
                parts.append(word.capitalize() if not parts or rng.random() < 0.15 else word)
            elif r < 0.9:
                parts.append(str(rng.randint(0, 999)))
            else:
                parts.append(rng.choice(_PUNCT))
        lines.append(" ".join(parts))
    return lines


def _build_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    # Individual digits: numbers must not be merged into opaque multi-digit tokens.
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=[PAD, BOS, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        chat_template=CHAT_TEMPLATE,
        model_max_length=MODEL_SHAPE["max_position_embeddings"],
        padding_side="left",  # must be a constructor arg: a later attribute assignment is not saved
        clean_up_tokenization_spaces=False,
    )


def _build_into(tmp: Path, seed: int) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = _build_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
        **MODEL_SHAPE,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)


def build_tiny_model(out_dir: Path, *, seed: int = 0) -> Path:
    """Build the tiny model into out_dir (idempotent, safe against concurrent builders)."""
    out_dir = Path(out_dir)
    params = {"recipe_version": RECIPE_VERSION, "seed": seed, "vocab_size": VOCAB_SIZE, **MODEL_SHAPE}
    if (out_dir / MARKER).exists():
        existing = json.loads((out_dir / MARKER).read_text())
        if existing != params:
            raise ValueError(f"{out_dir} holds a tiny model built with {existing}, not {params}")
        return out_dir
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        _build_into(tmp, seed)
        (tmp / MARKER).write_text(json.dumps(params, sort_keys=True) + "\n")  # last: marks completeness
        os.chmod(tmp, 0o755)  # mkdtemp makes it 0700; the model is shared read-only with job users
        try:
            # rename(2) replaces a missing or empty directory atomically; it fails if another
            # builder got there first, in which case its model is as good as ours.
            os.rename(tmp, out_dir)
        except OSError:
            if not (out_dir / MARKER).exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_dir
