"""The squared-ReLU gated unit (Primer, Nemotron-style MLPs): relu(gate)^2 * up."""

import torch
import torch.nn as nn

KINDS = ("squared_relu_gate",)
batch_size = 2
seq_len = 8
intermediate = 128
dtype = torch.float32
LLM_SIZES = {"batch_size": 4, "seq_len": 2048, "intermediate": 8192}
DYNAMIC = ("batch_size", "seq_len")


class Model(nn.Module):
    def forward(self, gate, up):
        return torch.square(torch.relu(gate)) * up


def get_inputs():
    return [
        torch.randn(batch_size, seq_len, intermediate, dtype=dtype),
        torch.randn(batch_size, seq_len, intermediate, dtype=dtype),
    ]


def get_init_inputs():
    return []
