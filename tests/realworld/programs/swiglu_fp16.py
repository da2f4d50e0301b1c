"""A SwiGLU MLP in float16 as Meta's Llama reference FeedForward writes it, the model run with .half() for
inference: w2(silu(w1(x)) * w3(x))."""

import torch
import torch.nn.functional as F
from torch import nn

batch_size, seq_len, dim, hidden_dim = 2, 8, 64, 128
dtype = torch.float16


class Model(nn.Module):
    def __init__(self, dim: int, hidden_dim: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)
        self.to(dtype)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


def get_inputs():
    return [torch.randn(batch_size, seq_len, dim, dtype=dtype)]


def get_init_inputs():
    return [dim, hidden_dim]
