"""Rotary position embedding as Llama's attention applies it: cos/sin from LlamaRotaryEmbedding for positions
0..seq-1, then apply_rotary_pos_emb on queries and keys; returns (q, k)."""

import torch
import torch.nn as nn
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

batch_size = 2
heads = 4
seq_len = 8
head_dim = 16
dtype = torch.float32


class Model(nn.Module):
    def __init__(self, heads, head_dim):
        super().__init__()
        config = LlamaConfig(hidden_size=heads * head_dim, num_attention_heads=heads, max_position_embeddings=8192)
        self.rotary_emb = LlamaRotaryEmbedding(config)

    def forward(self, q, k):
        position_ids = torch.arange(q.shape[2], device=q.device).unsqueeze(0).expand(q.shape[0], -1)
        cos, sin = self.rotary_emb(q, position_ids)
        return apply_rotary_pos_emb(q, k, cos, sin)


def get_inputs():
    return [
        torch.randn(batch_size, heads, seq_len, head_dim, dtype=dtype),
        torch.randn(batch_size, heads, seq_len, head_dim, dtype=dtype),
    ]


def get_init_inputs():
    return [heads, head_dim]
