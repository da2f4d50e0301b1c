"""Llama's RMSNorm imported from transformers, as a decoder layer's input norm (LlamaRMSNorm); its bfloat16 variant
as a model loaded with torch_dtype=torch.bfloat16 runs it: upcast to fp32 inside, cast back."""

import torch
import torch.nn as nn
from transformers.models.llama.modeling_llama import LlamaRMSNorm

batch_size, seq_len, hidden_size = 2, 8, 64
dtype = torch.float32


class Model(nn.Module):
    def __init__(self, hidden_size):
        super().__init__()
        self.input_layernorm = LlamaRMSNorm(hidden_size, eps=1e-6).to(dtype)

    def forward(self, hidden_states):
        return self.input_layernorm(hidden_states)


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden_size).to(dtype)]


def get_init_inputs():
    return [hidden_size]
