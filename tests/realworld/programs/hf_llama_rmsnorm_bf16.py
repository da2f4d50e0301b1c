"""Llama's RMSNorm in bfloat16, as a model loaded with torch_dtype=torch.bfloat16 runs it: upcast to fp32 inside,
cast back (LlamaRMSNorm)."""

import torch
import torch.nn as nn
from transformers.models.llama.modeling_llama import LlamaRMSNorm

KINDS = ("hf", "rmsnorm", "bf16")
batch_size = 2
seq_len = 8
hidden = 64
dtype = torch.bfloat16
LLM_SIZES = {"batch_size": 4, "seq_len": 4096, "hidden": 8192}
DYNAMIC = ("batch_size", "seq_len")


class Model(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.norm = LlamaRMSNorm(hidden, eps=1e-5)
        self.to(dtype)

    def forward(self, hidden_states):
        return self.norm(hidden_states)


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden, dtype=dtype)]


def get_init_inputs():
    return [hidden]
