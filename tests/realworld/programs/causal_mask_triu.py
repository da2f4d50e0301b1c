"""GPT-style causal attention probabilities with the mask built in forward: torch.ones(n, n).triu(1), masked_fill
with -inf, softmax."""

import math

import torch
import torch.nn as nn

batch_size, heads, seq_len, head_dim = 2, 4, 8, 64
dtype = torch.float32


class Model(nn.Module):
    def __init__(self, head_dim):
        super().__init__()
        self.scale = 1.0 / math.sqrt(head_dim)

    def forward(self, scores):
        n = scores.size(-1)
        mask = torch.ones(n, n, device=scores.device).triu(1).bool()
        scores = (scores * self.scale).masked_fill(mask, float("-inf"))
        return torch.softmax(scores, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, heads, seq_len, seq_len, dtype=dtype)]


def get_init_inputs():
    return [head_dim]
