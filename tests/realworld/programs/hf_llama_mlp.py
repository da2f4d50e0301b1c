"""Llama's feed-forward block from transformers: down(silu(gate(x)) * up(x)) (LlamaMLP built from a LlamaConfig)."""

import torch
import torch.nn as nn
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaMLP

batch_size, seq_len = 2, 8
hidden_size, intermediate_size = 64, 172
dtype = torch.float32


class Model(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.mlp = LlamaMLP(config).to(dtype)

    def forward(self, x):
        return self.mlp(x)


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden_size, dtype=dtype)]


def get_init_inputs():
    return [LlamaConfig(hidden_size=hidden_size, intermediate_size=intermediate_size, hidden_act="silu")]
