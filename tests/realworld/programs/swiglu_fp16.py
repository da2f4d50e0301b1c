"""A SwiGLU MLP in float16, as a model run with .half() for inference: down(silu(gate(x)) * up(x))."""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 2
seq_len = 8
hidden = 64
intermediate = 128
dtype = torch.float16


class Model(nn.Module):
    def __init__(self, hidden, intermediate):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)
        self.to(dtype)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden, dtype=dtype)]


def get_init_inputs():
    return [hidden, intermediate]
