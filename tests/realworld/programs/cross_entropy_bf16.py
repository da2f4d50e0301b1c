"""Cross-entropy on bfloat16 logits (a bf16 model's LM head output), mean over the tokens."""

import torch
import torch.nn as nn
import torch.nn.functional as F

KINDS = ("cross_entropy", "bf16")
tokens = 16
vocab = 128
dtype = torch.bfloat16
LLM_SIZES = {"tokens": 4096, "vocab": 128256}
DYNAMIC = ("tokens",)


class Model(nn.Module):
    def forward(self, logits, targets):
        return F.cross_entropy(logits, targets)


def get_inputs():
    return [torch.randn(tokens, vocab, dtype=dtype), torch.randint(0, vocab, (tokens,))]


def get_init_inputs():
    return []
