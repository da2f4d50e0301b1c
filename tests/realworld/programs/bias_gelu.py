"""The bias + GELU epilogue of a transformer MLP's first projection (BERT, GPT-2 with the tanh approximation)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 2
seq_len = 8
intermediate = 128
dtype = torch.float32


class Model(nn.Module):
    def __init__(self, intermediate):
        super().__init__()
        self.bias = nn.Parameter(0.02 * torch.randn(intermediate))
        self.to(dtype)

    def forward(self, x):
        return F.gelu(x + self.bias, approximate="tanh")


def get_inputs():
    return [torch.randn(batch_size, seq_len, intermediate, dtype=dtype)]


def get_init_inputs():
    return [intermediate]
