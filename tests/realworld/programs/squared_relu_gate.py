"""The squared-ReLU gated unit (Primer, Nemotron-style MLPs): relu(gate)^2 * up."""

import torch
import torch.nn as nn

batch_size, seq_len, intermediate = 2, 8, 128
dtype = torch.float32


class Model(nn.Module):
    def forward(self, gate, up):
        return torch.square(torch.relu(gate)) * up


def get_inputs():
    gate = torch.randn(batch_size, seq_len, intermediate, dtype=dtype)
    return [gate, torch.randn_like(gate)]


def get_init_inputs():
    return []
