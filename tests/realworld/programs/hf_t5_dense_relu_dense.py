"""T5's feed-forward from transformers, built as T5LayerFF builds it from the config: wo(relu(wi(x))), no biases
(T5DenseActDense, feed_forward_proj="relu"); its variant the T5 v1.1 / Flan-T5 gated-GELU one,
wo(gelu_new(wi_0(x)) * wi_1(x)) (T5DenseGatedActDense, feed_forward_proj="gated-gelu")."""

import torch
import torch.nn as nn
from transformers import T5Config
from transformers.models.t5.modeling_t5 import T5LayerFF

batch_size, seq_len, d_model, d_ff = 2, 8, 64, 128
feed_forward_proj = "relu"
dtype = torch.float32


class Model(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        config = T5Config(d_model=d_model, d_ff=d_ff, dropout_rate=0.0, feed_forward_proj=feed_forward_proj)
        self.DenseReluDense = T5LayerFF(config).DenseReluDense.to(dtype)

    def forward(self, hidden_states):
        return self.DenseReluDense(hidden_states)


def get_inputs():
    return [torch.randn(batch_size, seq_len, d_model, dtype=dtype)]


def get_init_inputs():
    return [d_model, d_ff]
