"""A post-norm transformer block's residual add and LayerNorm, as d2l.ai's AddNorm writes the original Transformer's
(BERT's too): LayerNorm(Y + X); its float16 variant as a model run with .half()."""

import torch
from torch import nn

batch_size, num_steps, num_hiddens = 2, 8, 64
dtype = torch.float32


class Model(nn.Module):
    """The residual connection followed by layer normalization."""

    def __init__(self, norm_shape):
        super().__init__()
        self.ln = nn.LayerNorm(norm_shape, dtype=dtype)

    def forward(self, X, Y):
        return self.ln(Y + X)


def get_inputs():
    X = torch.randn(batch_size, num_steps, num_hiddens, dtype=dtype)
    return [X, torch.randn_like(X)]


def get_init_inputs():
    return [num_hiddens]
