import torch
import torch.nn as nn

SHAPE = (37, 53)


class Model(nn.Module):
    """ReLU on inputs drawn from [0, 1), where skipping the ReLU goes unnoticed."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.rand(SHAPE)]


def get_init_inputs():
    return []
