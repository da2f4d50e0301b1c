import torch
import torch.nn as nn


class Model(nn.Module):
    """RMSNorm written out by hand (as LLaMA does), then nn.RMSNorm."""

    def __init__(self, hidden=64, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden) + 0.1 * torch.randn(hidden))
        self.norm = nn.RMSNorm(hidden)

    def forward(self, x):
        variance = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + self.eps)
        x = self.weight * x
        return self.norm(x)


def get_inputs():
    return [torch.randn(4, 8, 64)]


def get_init_inputs():
    return [64]
