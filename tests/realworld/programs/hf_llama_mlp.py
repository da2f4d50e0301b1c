"""Llama's feed-forward block from transformers: down(silu(gate(x)) * up(x)) (LlamaMLP built from a LlamaConfig)."""

import torch
import torch.nn as nn
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaMLP

batch_size = 2
seq_len = 8
hidden = 64
intermediate = 172
dtype = torch.float32


class Model(nn.Module):
    def __init__(self, hidden, intermediate):
        super().__init__()
        config = LlamaConfig(hidden_size=hidden, intermediate_size=intermediate, hidden_act="silu")
        self.mlp = LlamaMLP(config)
        self.to(dtype)

    def forward(self, x):
        return self.mlp(x)


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden, dtype=dtype)]


def get_init_inputs():
    return [hidden, intermediate]
