"""Rotary embedding written by hand (GPT-NeoX / Llama reference): a cos/sin cache built in __init__, sliced to the
sequence, rotate_half; returns the rotated queries."""

import torch
import torch.nn as nn

batch_size, heads, seq_len, head_dim = 2, 4, 8, 16
max_positions = 64
dtype = torch.float32


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


class Model(nn.Module):
    def __init__(self, head_dim, max_positions, base=10000.0):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2).float() / head_dim))
        freqs = torch.outer(torch.arange(max_positions).float(), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos().to(dtype), persistent=False)
        self.register_buffer("sin_cached", emb.sin().to(dtype), persistent=False)

    def forward(self, q):
        n = q.shape[-2]
        cos, sin = self.cos_cached[:n], self.sin_cached[:n]
        return q * cos + rotate_half(q) * sin


def get_inputs():
    return [torch.randn(batch_size, heads, seq_len, head_dim, dtype=dtype)]


def get_init_inputs():
    return [head_dim, max_positions]
