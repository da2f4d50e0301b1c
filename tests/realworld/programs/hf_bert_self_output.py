"""BERT's attention output from transformers: LayerNorm(dense(h) + residual) (BertSelfOutput with a BertConfig)."""

import torch
import torch.nn as nn
from transformers import BertConfig
from transformers.models.bert.modeling_bert import BertSelfOutput

batch_size = 2
seq_len = 8
hidden = 64
dtype = torch.float32


class Model(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        config = BertConfig(hidden_size=hidden, hidden_dropout_prob=0.0, layer_norm_eps=1e-12)
        self.output = BertSelfOutput(config)
        self.to(dtype)

    def forward(self, hidden_states, input_tensor):
        return self.output(hidden_states, input_tensor)


def get_inputs():
    return [
        torch.randn(batch_size, seq_len, hidden, dtype=dtype),
        torch.randn(batch_size, seq_len, hidden, dtype=dtype),
    ]


def get_init_inputs():
    return [hidden]
