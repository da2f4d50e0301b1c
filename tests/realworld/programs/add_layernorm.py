"""A post-norm transformer block's residual add and LayerNorm (BERT, the original Transformer); its float16 variant
as a model run with .half()."""

import torch
import torch.nn as nn

batch_size = 2
seq_len = 8
hidden = 64
dtype = torch.float32


class Model(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.norm = nn.LayerNorm(hidden, eps=1e-5, dtype=dtype)

    def forward(self, x, residual):
        return self.norm(x + residual)


def get_inputs():
    x = torch.randn(batch_size, seq_len, hidden, dtype=dtype)
    return [x, torch.randn_like(x)]


def get_init_inputs():
    return [hidden]
