"""A decoder's attention core as nanoGPT's manual path writes it: q @ k^T / sqrt(d), causal mask from
torch.tril(torch.ones(n, n)) built in forward, softmax, @ v."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size, n_head, seq_len, head_size = 2, 4, 8, 16
dtype = torch.float32


class Model(nn.Module):
    def forward(self, q, k, v):
        n = q.size(-2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(torch.tril(torch.ones(n, n, device=q.device)) == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        return att @ v  # (B, nh, T, T) x (B, nh, T, hs) -> (B, nh, T, hs)


def get_inputs():
    q, k, v = (torch.randn(batch_size, n_head, seq_len, head_size, dtype=dtype) for _ in range(3))
    return [q, k, v]


def get_init_inputs():
    return []
