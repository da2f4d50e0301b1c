"""A stack of residual MLP layers held in an nn.ModuleList and applied in a Python loop, then a final LayerNorm."""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size, seq_len, hidden = 2, 8, 64
num_layers = 3
dtype = torch.float32


class Model(nn.Module):
    def __init__(self, hidden, num_layers):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(hidden, hidden) for _ in range(num_layers)])
        self.norm = nn.LayerNorm(hidden)
        self.to(dtype)

    def forward(self, x):
        for layer in self.layers:
            x = x + F.gelu(layer(x))
        return self.norm(x)


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden, dtype=dtype)]


def get_init_inputs():
    return [hidden, num_layers]
