"""A feed-forward layer as in the original Transformer and most MLP heads: nn.Linear with bias, then ReLU."""

import torch
import torch.nn as nn

batch_size, seq_len, d_model, d_ff = 2, 8, 64, 128
dtype = torch.float32


class Model(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.to(dtype)

    def forward(self, x):
        return self.w_1(x).relu()


def get_inputs():
    return [torch.randn(batch_size, seq_len, d_model, dtype=dtype)]


def get_init_inputs():
    return [d_model, d_ff]
