"""The bias + GELU epilogue of a transformer MLP's first projection (BERT, GPT-2 with the tanh approximation), the
bias kept out of the matmul as Megatron-LM's fused bias_gelu keeps it."""

import torch
import torch.nn.functional as F
from torch import nn

batch_size, seq_len, intermediate = 2, 8, 128
dtype = torch.float32


class Model(nn.Module):
    def __init__(self, intermediate):
        super().__init__()
        self.bias = nn.Parameter(torch.empty(intermediate, dtype=dtype).normal_(std=0.02))

    def forward(self, x):
        return F.gelu(x + self.bias, approximate="tanh")


def get_inputs():
    return [torch.randn(batch_size, seq_len, intermediate, dtype=dtype)]


def get_init_inputs():
    return [intermediate]
