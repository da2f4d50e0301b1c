"""A language model's loss: cross-entropy of the logits over the vocabulary against next-token ids."""

import torch
import torch.nn as nn
import torch.nn.functional as F

KINDS = ("cross_entropy",)
tokens = 16
vocab = 128
dtype = torch.float32
LLM_SIZES = {"tokens": 4096, "vocab": 32000}
DYNAMIC = ("tokens",)


class Model(nn.Module):
    def forward(self, logits, targets):
        return F.cross_entropy(logits, targets)


def get_inputs():
    return [torch.randn(tokens, vocab, dtype=dtype), torch.randint(0, vocab, (tokens,))]


def get_init_inputs():
    return []
