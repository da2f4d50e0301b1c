"""T5's LayerNorm from transformers: scale only, no mean subtraction, variance in fp32 (T5LayerNorm), as T5Stack
builds its final norm from the config."""

import torch
import torch.nn as nn
from transformers import T5Config
from transformers.models.t5.modeling_t5 import T5LayerNorm

batch_size, seq_len, d_model = 2, 8, 64
dtype = torch.float32


class Model(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.final_layer_norm = T5LayerNorm(config.d_model, eps=config.layer_norm_epsilon)
        self.to(dtype)

    def forward(self, hidden_states):
        return self.final_layer_norm(hidden_states)


def get_inputs():
    return [torch.randn(batch_size, seq_len, d_model, dtype=dtype)]


def get_init_inputs():
    return [T5Config(d_model=d_model, layer_norm_epsilon=1e-6)]
