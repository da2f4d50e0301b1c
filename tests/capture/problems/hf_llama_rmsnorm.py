import torch
import torch.nn as nn
from transformers.models.llama.modeling_llama import LlamaRMSNorm

batch_size = 2
seq_len = 8
hidden = 64


class Model(nn.Module):
    """A Llama block's input norm, imported as users import it."""

    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.norm = LlamaRMSNorm(hidden_size, eps=eps)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden)]


def get_init_inputs():
    return [hidden]
