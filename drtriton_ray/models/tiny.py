"""A tiny random Qwen2 model with a locally trained tokenizer, for tests and smoke runs (nothing downloaded).

The tokenizer is a byte-level BPE trained on the running Python's stdlib sources with Qwen2's own normalizer and
pre-tokenizer: transformers loads any `model_type: qwen2` folder through `Qwen2Tokenizer`, which rebuilds that
pipeline, so a tokenizer trained any other way would encode differently after a reload."""

from __future__ import annotations

import sysconfig
from pathlib import Path

SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
VOCAB_SIZE = 2048
MAX_LENGTH = 8192
# ChatML, as Qwen2 instruct models use it, so prompts render the same way for the tiny model and the real ones.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def training_files() -> list[Path]:
    """Top-level stdlib modules in name order: real Python, present everywhere, and a fixed order keeps the
    trained vocabulary the same from run to run (it follows the Python version, as the stdlib does)."""
    return sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))


def train_tokenizer():
    """A `tokenizers.Tokenizer` (byte-level BPE, VOCAB_SIZE entries, SPECIALS first)."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=list(SPECIALS),
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train([str(f) for f in training_files()], trainer)
    return tok


def build_tiny(out: Path, seed: int) -> None:
    """Write the model (random init from `seed`), its tokenizer and chat template into the folder `out`."""
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig, PreTrainedTokenizerFast, Qwen2Config

    raw = train_tokenizer()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=raw,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        model_max_length=MAX_LENGTH,
        chat_template=CHATML_TEMPLATE,
    )
    eos, pad = tok.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])
    config = Qwen2Config(
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        head_dim=64,
        num_key_value_heads=1,
        intermediate_size=256,
        vocab_size=VOCAB_SIZE,
        max_position_embeddings=MAX_LENGTH,
        # untied: vLLM weight reloads break on tied embeddings (ENVIRONMENT.md 5, trap 3)
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=eos,
        pad_token_id=pad,
    )
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.generation_config = GenerationConfig(eos_token_id=eos, pad_token_id=pad)
    model.save_pretrained(out)
    tok.save_pretrained(out)
