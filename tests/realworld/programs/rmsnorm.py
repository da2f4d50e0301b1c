"""RMSNorm as Meta's Llama reference code writes it by hand: x * rsqrt(mean(x^2) + eps) in fp32, cast back, times
the weight."""

import torch
import torch.nn as nn

batch_size, seq_len, dim = 2, 8, 64
dtype = torch.float32


class Model(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim, dtype=dtype) + 0.1 * torch.randn(dim, dtype=dtype))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        output = self._norm(x.float()).type_as(x)
        return output * self.weight


def get_inputs():
    return [torch.randn(batch_size, seq_len, dim, dtype=dtype)]


def get_init_inputs():
    return [dim]
