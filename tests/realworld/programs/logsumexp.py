"""The log-partition of a vocabulary's logits (the z-loss of PaLM/Mamba training): logsumexp over the last dim."""

import torch
import torch.nn as nn

tokens, vocab = 16, 128
dtype = torch.float32


class Model(nn.Module):
    def forward(self, logits):
        return torch.logsumexp(logits, dim=-1)


def get_inputs():
    return [torch.randn(tokens, vocab, dtype=dtype)]


def get_init_inputs():
    return []
