"""Attention written with torch.einsum, as research code and the einops style do:
softmax(einsum("bhqd,bhkd->bhqk") * scale) then einsum("bhqk,bhkd->bhqd")."""

import torch
import torch.nn as nn

batch_size = 2
heads = 4
seq_len = 8
head_dim = 16
dtype = torch.float32


class Model(nn.Module):
    def forward(self, q, k, v):
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k) * q.shape[-1] ** -0.5
        probs = scores.softmax(dim=-1)
        return torch.einsum("bhqk,bhkd->bhqd", probs, v)


def get_inputs():
    return [torch.randn(batch_size, heads, seq_len, head_dim, dtype=dtype) for _ in range(3)]


def get_init_inputs():
    return []
