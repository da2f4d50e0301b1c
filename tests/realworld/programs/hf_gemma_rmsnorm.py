"""Gemma 2's sandwich norm from transformers: the attention output normalized by its own RMSNorm, whose weight is
stored as an offset (the scale is 1 + weight), before the residual add (Gemma2DecoderLayer's
post_attention_layernorm)."""

import torch
import torch.nn as nn
from transformers.models.gemma2.modeling_gemma2 import Gemma2RMSNorm

batch_size, seq_len, hidden_size = 2, 8, 64
dtype = torch.float32


class Model(nn.Module):
    def __init__(self, hidden_size, rms_norm_eps=1e-6):
        super().__init__()
        self.post_attention_layernorm = Gemma2RMSNorm(hidden_size, eps=rms_norm_eps)
        self.to(dtype)

    def forward(self, residual, attn_output):
        return residual + self.post_attention_layernorm(attn_output)


def get_inputs():
    residual = torch.randn(batch_size, seq_len, hidden_size, dtype=dtype)
    return [residual, torch.randn(batch_size, seq_len, hidden_size, dtype=dtype)]


def get_init_inputs():
    return [hidden_size]
