"""GPT-2's MLP from transformers: Conv1D (a transposed Linear), gelu_new, Conv1D (GPT2MLP with a GPT2Config)."""

import torch
import torch.nn as nn
from transformers import GPT2Config
from transformers.models.gpt2.modeling_gpt2 import GPT2MLP

batch_size = 2
seq_len = 8
n_embd = 64
dtype = torch.float32


class Model(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        config = GPT2Config(n_embd=n_embd, resid_pdrop=0.0)  # dropout off: an inference-time block
        self.mlp = GPT2MLP(4 * n_embd, config)
        self.to(dtype)

    def forward(self, hidden_states):
        return self.mlp(hidden_states)


def get_inputs():
    return [torch.randn(batch_size, seq_len, n_embd, dtype=dtype)]


def get_init_inputs():
    return [n_embd]
