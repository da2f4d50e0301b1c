"""The tiny Qwen2 model: folder, reload, tokenizer identity across save/load, chat template, seeding, and the same
greedy tokens from transformers and vLLM."""

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from drtriton_ray.models import load_model, prepare_model
from drtriton_ray.models.tiny import SPECIALS, VOCAB_SIZE, train_tokenizer
from drtriton_ray.prompts import build_messages
from drtriton_ray.synth import Sampler, SynthConfig

# Code, prose, unicode (NFC-normalised), odd whitespace: text the tokenizer did not train on.
SAMPLE = (
    Sampler(SynthConfig(level=2, profile="small"), seed=5).sample(0).source
    + "Größe = 'naïve café' # 中文 注释\r\n\tx  =  1e-3\n\n\n  <|im_start|>user\nhi<|im_end|>\n"
)


@pytest.fixture(scope="module")
def llm(tiny_dir, vllm_engine):
    with vllm_engine(tiny_dir) as engine:
        yield engine


def test_tiny_folder_reloads(tiny_dir):
    names = {p.name for p in tiny_dir.iterdir()}
    assert {
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "chat_template.jinja",
        "generation_config.json",
    } <= names
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    c = model.config
    assert (
        type(model).__name__,
        c.hidden_size,
        c.num_hidden_layers,
        c.num_attention_heads,
        c.head_dim,
        c.num_key_value_heads,
        c.intermediate_size,
        c.vocab_size,
    ) == ("Qwen2ForCausalLM", 128, 2, 2, 64, 1, 256, VOCAB_SIZE)
    assert not c.tie_word_embeddings
    assert model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr()
    assert sum(p.numel() for p in model.parameters()) == 820_352
    bf16, _ = load_model(tiny_dir, "bf16")
    assert bf16.dtype == torch.bfloat16 and not bf16.training


def test_tiny_tokenizer_identical_after_reload(tiny_dir, tmp_path):
    trained = train_tokenizer()  # what the builder trained, before any transformers wrapping or saving
    loaded = AutoTokenizer.from_pretrained(tiny_dir)
    assert type(loaded).__name__ == "Qwen2Tokenizer"  # transformers picks it for model_type qwen2 and rebuilds
    assert len(loaded) == VOCAB_SIZE and loaded.model_max_length == 8192
    ids = trained.encode(SAMPLE).ids
    assert len(ids) > 200 and loaded.encode(SAMPLE) == ids
    assert loaded.decode(ids) == SAMPLE
    loaded.save_pretrained(tmp_path)  # and once more through a save/load of the loaded one
    assert AutoTokenizer.from_pretrained(tmp_path).encode(SAMPLE) == ids
    assert [loaded.convert_tokens_to_ids(s) for s in SPECIALS] == [0, 1, 2]
    assert (loaded.eos_token, loaded.pad_token) == ("<|im_end|>", "<|endoftext|>")


def test_tiny_chat_template_renders_chatml(tiny_dir):
    _, tok = load_model(tiny_dir)
    messages = build_messages("print(1)")
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert (
        text
        == "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages) + "<|im_start|>assistant\n"
    )
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    assert ids[0] == tok.convert_tokens_to_ids("<|im_start|>") and tok.decode(ids) == text


def test_tiny_deterministic_for_seed(tiny_dir, tmp_path):
    same = prepare_model("tiny", tmp_path / "same", seed=0)
    other = prepare_model("tiny", tmp_path / "other", seed=1)
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        assert (same / name).read_bytes() == (tiny_dir / name).read_bytes(), name
    assert (other / "tokenizer.json").read_bytes() == (tiny_dir / "tokenizer.json").read_bytes()
    assert (other / "model.safetensors").read_bytes() != (tiny_dir / "model.safetensors").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other", "same"]  # no temp folders left


def test_tiny_hf_and_vllm_greedy_identical(tiny_dir, llm, greedy_hf_vllm):
    """The real prompt of a synthesized program, through both engines."""
    model, tok = load_model(tiny_dir)
    source = Sampler(SynthConfig(level=1, profile="small"), seed=0).sample(0).source
    (hf_ids, hf_text), (v_ids, v_text) = greedy_hf_vllm(build_messages(source), model, tok, llm, 32)
    assert len(hf_ids) == 32 and hf_ids == v_ids
    assert hf_text == v_text and hf_text
