"""A pre-norm decoder's fused residual add + RMSNorm (vLLM's fused_add_rms_norm contract): returns
(normed, new residual)."""

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
        self.weight = nn.Parameter(torch.ones(hidden))
        self.to(dtype)

    def forward(self, x, residual):
        residual = x + residual
        h = residual.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype), residual


def get_inputs():
    return [
        torch.randn(batch_size, seq_len, hidden, dtype=dtype),
        torch.randn(batch_size, seq_len, hidden, dtype=dtype),
    ]


def get_init_inputs():
    return [hidden]
