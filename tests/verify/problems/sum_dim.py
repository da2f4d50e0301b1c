import torch
import torch.nn as nn


class Model(nn.Module):
    """Sum along dim 1."""

    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.sum(x, dim=self.dim)


def get_inputs():
    return [torch.randn(13, 70)]


def get_init_inputs():
    return [1]
