"""BERT's attention output from transformers: LayerNorm(dense(h) + residual) (BertSelfOutput with a BertConfig)."""

import torch
import torch.nn as nn
from transformers import BertConfig
from transformers.models.bert.modeling_bert import BertSelfOutput

batch_size, seq_length, hidden_size = 2, 8, 64
dtype = torch.float32


class Model(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.output = BertSelfOutput(config).to(dtype)

    def forward(self, self_outputs, hidden_states):
        return self.output(self_outputs, hidden_states)


def get_inputs():
    hidden_states = torch.randn(batch_size, seq_length, hidden_size, dtype=dtype)
    self_outputs = torch.randn_like(hidden_states)  # the attention's context layer
    return [self_outputs, hidden_states]


def get_init_inputs():
    return [BertConfig(hidden_size=hidden_size, hidden_dropout_prob=0.0, layer_norm_eps=1e-12)]
