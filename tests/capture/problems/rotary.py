import torch
import torch.nn as nn


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


class Model(nn.Module):
    """Rotary position embedding of queries (batch, heads, seq, head_dim) with precomputed cos/sin tables."""

    def __init__(self, seq=8, head_dim=16):
        super().__init__()
        inv_freq = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
        angles = torch.outer(torch.arange(seq).float(), inv_freq)
        emb = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos", emb.cos())
        self.register_buffer("sin", emb.sin())

    def forward(self, q):
        return q * self.cos + rotate_half(q) * self.sin


def get_inputs():
    return [torch.randn(4, 2, 8, 16)]


def get_init_inputs():
    return [8, 16]
