import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """LLaMA's feed-forward block: down(silu(gate(x)) * up(x)), no biases."""

    def __init__(self, hidden=64, inner=128):
        super().__init__()
        self.gate = nn.Linear(hidden, inner, bias=False)
        self.up = nn.Linear(hidden, inner, bias=False)
        self.down = nn.Linear(inner, hidden, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


def get_inputs():
    return [torch.randn(4, 8, 64)]


def get_init_inputs():
    return [64, 128]
