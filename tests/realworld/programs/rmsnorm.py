"""RMSNorm as written by hand in nanoGPT-style and Mistral reference code: x * rsqrt(mean(x^2) + eps) * weight."""

import torch
import torch.nn as nn

batch_size = 2
seq_len = 8
hidden = 64
dtype = torch.float32


class Model(nn.Module):
    def __init__(self, hidden, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden) + 0.1 * torch.randn(hidden))
        self.to(dtype)

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden, dtype=dtype)]


def get_init_inputs():
    return [hidden]
