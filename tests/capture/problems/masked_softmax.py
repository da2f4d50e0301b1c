import torch
import torch.nn as nn


class Model(nn.Module):
    """Attention scores masked with a boolean mask, then softmax over keys."""

    def __init__(self, scale=0.25):
        super().__init__()
        self.scale = scale

    def forward(self, scores, mask):
        scores = scores * self.scale
        scores = scores.masked_fill(mask, float("-inf"))
        return torch.softmax(scores, dim=-1)


def get_inputs():
    scores = torch.randn(4, 2, 8, 8)
    mask = torch.triu(torch.ones(8, 8, dtype=torch.bool), diagonal=1).expand(4, 2, 8, 8).contiguous()
    return [scores, mask]


def get_init_inputs():
    return [0.25]
