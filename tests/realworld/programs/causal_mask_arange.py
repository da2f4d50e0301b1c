"""Causal attention probabilities with the mask from positions built in forward (as Hugging Face's
create_causal_mask does): key position > query position is masked."""

import torch
import torch.nn as nn

batch_size = 2
heads = 4
seq_len = 8
dtype = torch.float32


class Model(nn.Module):
    def forward(self, scores):
        n = scores.shape[-1]
        positions = torch.arange(n, device=scores.device)
        mask = positions[:, None] < positions[None, :]
        scores = scores.masked_fill(mask, torch.finfo(scores.dtype).min)
        return torch.softmax(scores.float(), dim=-1).to(scores.dtype)


def get_inputs():
    return [torch.randn(batch_size, heads, seq_len, seq_len, dtype=dtype)]


def get_init_inputs():
    return []
