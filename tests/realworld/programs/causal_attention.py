"""A decoder's attention core as nanoGPT's manual path writes it: q @ k^T / sqrt(d), causal mask from
torch.tril(torch.ones(n, n)) built in forward, softmax, @ v."""

import math

import torch
import torch.nn as nn

batch_size = 2
heads = 4
seq_len = 8
head_dim = 16
dtype = torch.float32


class Model(nn.Module):
    def forward(self, q, k, v):
        n = q.size(-2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        causal = torch.tril(torch.ones(n, n, device=q.device))
        att = att.masked_fill(causal == 0, float("-inf"))
        att = torch.softmax(att, dim=-1)
        return att @ v


def get_inputs():
    return [torch.randn(batch_size, heads, seq_len, head_dim, dtype=dtype) for _ in range(3)]


def get_init_inputs():
    return []
