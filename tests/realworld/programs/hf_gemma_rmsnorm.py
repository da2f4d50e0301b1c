"""Gemma's RMSNorm from transformers: the weight is stored as an offset, the scale is (1 + weight) (GemmaRMSNorm, as
a decoder layer's input_layernorm)."""

import torch
import torch.nn as nn
from transformers.models.gemma.modeling_gemma import GemmaRMSNorm

batch_size, seq_len, hidden_size = 2, 8, 64
dtype = torch.float32


class Model(nn.Module):
    def __init__(self, hidden_size, rms_norm_eps=1e-6):
        super().__init__()
        self.input_layernorm = GemmaRMSNorm(hidden_size, eps=rms_norm_eps)
        self.to(dtype)

    def forward(self, hidden_states):
        return self.input_layernorm(hidden_states)


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden_size, dtype=dtype)]


def get_init_inputs():
    return [hidden_size]
