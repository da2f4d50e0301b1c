"""A language model's loss: cross-entropy of the logits over the vocabulary against next-token ids; its bfloat16
variant on a bf16 model's LM head output, mean over the tokens."""

import torch
import torch.nn as nn
import torch.nn.functional as F

KINDS = ("cross_entropy",)
tokens = 16
vocab = 128
dtype = torch.float32
LLM_SIZES = {"tokens": 4096, "vocab": 32000}
DYNAMIC = ("tokens",)
VARIANTS = {
    "cross_entropy_bf16": {
        "dtype": "bfloat16",
        "KINDS": ("cross_entropy", "bf16"),
        "LLM_SIZES": {"tokens": 4096, "vocab": 128256},
    },
}


class Model(nn.Module):
    def forward(self, logits, targets):
        return F.cross_entropy(logits, targets)


def get_inputs():
    logits = torch.randn(tokens, vocab, dtype=dtype)
    return [logits, torch.randint(0, vocab, (tokens,))]


def get_init_inputs():
    return []
