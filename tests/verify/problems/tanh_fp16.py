import torch
import torch.nn as nn


class Model(nn.Module):
    """tanh of a float16 tensor, scaled: judged by float16 standards."""

    def forward(self, x):
        return torch.tanh(x) * 2.0


def get_inputs():
    return [torch.randn(23, 41, dtype=torch.float16)]


def get_init_inputs():
    return []
