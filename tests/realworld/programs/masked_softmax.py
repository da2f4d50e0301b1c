"""BERT-style attention probabilities: scaled scores with a padding mask (batch, 1, 1, seq) broadcast over heads and
queries, masked_fill with -inf, softmax."""

import torch
import torch.nn as nn

batch_size, heads, seq_len = 2, 4, 8
dtype = torch.float32


class Model(nn.Module):
    def __init__(self, scale=0.125):
        super().__init__()
        self.scale = scale

    def forward(self, scores, padding_mask):
        scores = scores * self.scale
        scores = scores.masked_fill(padding_mask[:, None, None, :], float("-inf"))
        return torch.softmax(scores, dim=-1)


def get_inputs():
    lengths = torch.randint(seq_len // 2, seq_len + 1, (batch_size,))
    padding_mask = torch.arange(seq_len)[None, :] >= lengths[:, None]
    return [torch.randn(batch_size, heads, seq_len, seq_len, dtype=dtype), padding_mask]


def get_init_inputs():
    return []
