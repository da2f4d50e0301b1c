"""Residual add and LayerNorm in float16 (a model run with .half()), returning the normed output and the new
residual stream as a tuple, as pre-norm decoders pass both on."""

import torch
import torch.nn as nn

KINDS = ("add_layernorm", "fp16", "tuple_output")
batch_size = 2
seq_len = 8
hidden = 64
dtype = torch.float16
LLM_SIZES = {"batch_size": 4, "seq_len": 2048, "hidden": 4096}
DYNAMIC = ("batch_size", "seq_len")


class Model(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        self.to(dtype)

    def forward(self, x, residual):
        residual = x + residual
        return self.norm(residual), residual


def get_inputs():
    return [
        torch.randn(batch_size, seq_len, hidden, dtype=dtype),
        torch.randn(batch_size, seq_len, hidden, dtype=dtype),
    ]


def get_init_inputs():
    return [hidden]
