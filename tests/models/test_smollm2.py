"""`drtriton prepare-model smollm2`: the GGUF conversion, the folder in transformers and in vLLM, same greedy text."""

import json

import pytest
import torch
from safetensors import safe_open

from drtriton_ray.models import load_model


@pytest.fixture(scope="module")
def llm(smollm2_cli, vllm_engine):
    with vllm_engine(smollm2_cli[1]) as engine:
        yield engine


def test_prepare_smollm2_writes_plain_folder(smollm2_cli):
    result, out = smollm2_cli
    files = {
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "chat_template.jinja",
    }
    assert {p.name for p in out.iterdir()} == files
    assert [p.name for p in out.parent.iterdir()] == ["smollm2"]  # the temp folder was renamed, nothing left
    for name in files:
        assert name in result.output  # the CLI lists what it wrote
    assert "wrote 6 files" in result.output and str(out) in result.output
    config = json.loads((out / "config.json").read_text())
    assert "quantization_config" not in config and config["tie_word_embeddings"] is False
    assert json.loads((out / "tokenizer_config.json").read_text())["model_max_length"] == 8192
    with safe_open(out / "model.safetensors", "pt") as f:
        assert f.get_tensor("model.embed_tokens.weight").dtype == torch.float32
        assert torch.equal(f.get_tensor("lm_head.weight"), f.get_tensor("model.embed_tokens.weight"))


def test_smollm2_hf_and_vllm_greedy_identical(smollm2_cli, llm, greedy_hf_vllm):
    model, tok = load_model(smollm2_cli[1])
    assert type(model).__name__ == "LlamaForCausalLM" and not model.config.tie_word_embeddings
    assert sum(p.numel() for p in model.parameters()) == 162_826_560
    messages = [{"role": "user", "content": "Write a Python function that returns the square of a number."}]
    (hf_ids, hf_text), (v_ids, v_text) = greedy_hf_vllm(messages, model, tok, llm, 24)
    assert hf_ids == v_ids and hf_text == v_text
    assert "def " in hf_text  # a pretrained model: it answers with code, not noise
