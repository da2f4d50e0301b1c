"""The SwiGLU activation of Llama/Mistral MLPs on a fused gate_up projection's output: silu(gate) * up."""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size, seq_len, intermediate = 2, 8, 128
dtype = torch.float32


class Model(nn.Module):
    def forward(self, gate_up):
        gate, up = gate_up.chunk(2, dim=-1)
        return F.silu(gate) * up


def get_inputs():
    return [torch.randn(batch_size, seq_len, 2 * intermediate, dtype=dtype)]


def get_init_inputs():
    return []
