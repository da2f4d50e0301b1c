import torch
import torch.nn as nn


class Model(nn.Module):
    """tanh, float32: a kernel approximating it over a limited range breaks on wide inputs."""

    def forward(self, x):
        return torch.tanh(x)


def get_inputs():
    return [torch.randn(29, 31)]


def get_init_inputs():
    return []
