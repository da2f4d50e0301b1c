"""A pre-norm decoder's fused residual add + RMSNorm, as vLLM's RMSNorm.forward_native computes it (the contract of
its fused_add_rms_norm kernel): returns (normed, new residual)."""

import torch
import torch.nn as nn

num_tokens, hidden_size = 16, 64
dtype = torch.float32


class Model(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size, dtype=dtype))
        self.variance_epsilon = eps

    def forward(self, x, residual):
        orig_dtype = x.dtype
        x = x.to(torch.float32) + residual.to(torch.float32)
        residual = x.to(orig_dtype)
        variance = x.pow(2).mean(dim=-1, keepdim=True)
        x = x * torch.rsqrt(variance + self.variance_epsilon)
        return x.to(orig_dtype) * self.weight, residual


def get_inputs():
    x = torch.randn(num_tokens, hidden_size, dtype=dtype)
    residual = torch.randn(num_tokens, hidden_size, dtype=dtype)
    return [x, residual]


def get_init_inputs():
    return [hidden_size]
