import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Bias add and GELU after a matmul by the module's weight, scaled."""

    def __init__(self, hidden=64):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(hidden, hidden) / hidden**0.5)
        self.bias = nn.Parameter(torch.zeros(hidden))

    def forward(self, x):
        y = torch.matmul(x, self.weight) + self.bias
        return F.gelu(y) * 0.5


def get_inputs():
    return [torch.randn(4, 64)]


def get_init_inputs():
    return [64]
