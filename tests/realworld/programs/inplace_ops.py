"""In-place operations as memory-conscious model code writes them: a projection, then h.mul_(scale), h.add_(x),
relu_ on the intermediate."""

import torch
import torch.nn as nn

batch_size, seq_len, hidden = 2, 8, 64
dtype = torch.float32


class Model(nn.Module):
    def __init__(self, hidden, scale=0.5):
        super().__init__()
        self.proj = nn.Linear(hidden, hidden, dtype=dtype)
        self.scale = scale

    def forward(self, x):
        h = self.proj(x)
        h.mul_(self.scale)
        h.add_(x)
        return torch.relu_(h)


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden, dtype=dtype)]


def get_init_inputs():
    return [hidden]
