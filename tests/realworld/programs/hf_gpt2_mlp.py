"""GPT-2's MLP from transformers: Conv1D (a transposed Linear), gelu_new, Conv1D (GPT2MLP with a GPT2Config)."""

import torch
import torch.nn as nn
from transformers import GPT2Config
from transformers.models.gpt2.modeling_gpt2 import GPT2MLP

batch_size, seq_len, n_embd = 2, 8, 64
dtype = torch.float32


class Model(nn.Module):
    def __init__(self, config):
        super().__init__()
        inner_dim = config.n_inner if config.n_inner is not None else 4 * config.hidden_size
        self.mlp = GPT2MLP(inner_dim, config).to(dtype)

    def forward(self, hidden_states):
        return self.mlp(hidden_states)


def get_inputs():
    return [torch.randn(batch_size, seq_len, n_embd, dtype=dtype)]


def get_init_inputs():
    return [GPT2Config(n_embd=n_embd, resid_pdrop=0.0)]  # dropout off: an inference-time block
