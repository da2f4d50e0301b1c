"""Gemma's RMSNorm from transformers: the weight is stored as an offset, the scale is (1 + weight) (GemmaRMSNorm)."""

import torch
import torch.nn as nn
from transformers.models.gemma.modeling_gemma import GemmaRMSNorm

batch_size = 2
seq_len = 8
hidden = 64
dtype = torch.float32


class Model(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.norm = GemmaRMSNorm(hidden, eps=1e-6)
        self.to(dtype)

    def forward(self, hidden_states):
        return self.norm(hidden_states)


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden, dtype=dtype)]


def get_init_inputs():
    return [hidden]
