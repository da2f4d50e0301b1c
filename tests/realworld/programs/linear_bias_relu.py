"""A feed-forward layer as in the original Transformer and most MLP heads: nn.Linear with bias, then ReLU."""

import torch
import torch.nn as nn

batch_size = 2
seq_len = 8
hidden = 64
out_features = 128
dtype = torch.float32


class Model(nn.Module):
    def __init__(self, hidden, out_features):
        super().__init__()
        self.fc = nn.Linear(hidden, out_features)
        self.act = nn.ReLU()
        self.to(dtype)

    def forward(self, x):
        return self.act(self.fc(x))


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden, dtype=dtype)]


def get_init_inputs():
    return [hidden, out_features]
