import torch
import torch.nn as nn
import torch.nn.functional as F

IN, OUT = 24, 16


class Model(nn.Module):
    """Linear -> ReLU -> scale, with parameters made in __init__."""

    def __init__(self, scale):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(OUT, IN) * 0.2)
        self.bias = nn.Parameter(0.1 * torch.randn(OUT))
        self.scale = scale

    def forward(self, x):
        return torch.relu(F.linear(x, self.weight, self.bias)) * self.scale


def get_inputs():
    return [torch.randn(20, IN)]


def get_init_inputs():
    return [0.5]
