"""Causal attention in bfloat16 through PyTorch's fused kernel, as Hugging Face's "sdpa" attention runs it:
F.scaled_dot_product_attention(q, k, v, is_causal=True)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 2
heads = 4
seq_len = 8
head_dim = 16
dtype = torch.bfloat16


class Model(nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def get_inputs():
    return [torch.randn(batch_size, heads, seq_len, head_dim, dtype=dtype) for _ in range(3)]


def get_init_inputs():
    return []
