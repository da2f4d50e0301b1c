"""Causal attention probabilities with the mask from positions built in forward (as Hugging Face's
create_causal_mask does): key position > query position is masked."""

import torch
import torch.nn as nn

batch_size, heads, seq_len = 2, 4, 8
dtype = torch.float32


class Model(nn.Module):
    def forward(self, attn_weights):
        cache_position = torch.arange(attn_weights.shape[-1], device=attn_weights.device)
        causal_mask = cache_position[:, None] < cache_position[None, :]
        min_dtype = torch.finfo(attn_weights.dtype).min
        attn_weights = attn_weights.masked_fill(causal_mask, min_dtype)
        return nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(attn_weights.dtype)


def get_inputs():
    return [torch.randn(batch_size, heads, seq_len, seq_len, dtype=dtype)]


def get_init_inputs():
    return []
