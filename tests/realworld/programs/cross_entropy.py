"""A language model's loss: cross-entropy of the logits over the vocabulary against next-token ids; its bfloat16
variant on a bf16 model's LM head output, mean over the tokens."""

import torch
import torch.nn as nn
import torch.nn.functional as F

tokens, vocab = 16, 128
dtype = torch.float32


class Model(nn.Module):
    def forward(self, logits, targets):
        return F.cross_entropy(logits, targets)


def get_inputs():
    logits = torch.randn(tokens, vocab, dtype=dtype)
    return [logits, torch.randint(0, vocab, (tokens,))]


def get_init_inputs():
    return []
