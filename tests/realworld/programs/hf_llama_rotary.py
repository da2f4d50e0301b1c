"""Rotary position embedding as Llama's attention applies it: cos/sin from LlamaRotaryEmbedding for positions
0..seq-1, then apply_rotary_pos_emb on queries and keys; returns (q, k)."""

import torch
import torch.nn as nn
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

batch_size, num_heads, seq_len, head_dim = 2, 4, 8, 16
dtype = torch.float32


class Model(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.rotary_emb = LlamaRotaryEmbedding(config)

    def forward(self, query_states, key_states):
        position_ids = torch.arange(query_states.shape[2], device=query_states.device).unsqueeze(0)
        cos, sin = self.rotary_emb(query_states, position_ids.expand(query_states.shape[0], -1))
        return apply_rotary_pos_emb(query_states, key_states, cos, sin)


def get_inputs():
    shape = (batch_size, num_heads, seq_len, head_dim)
    return [torch.randn(shape, dtype=dtype), torch.randn(shape, dtype=dtype)]


def get_init_inputs():
    config = LlamaConfig(hidden_size=num_heads * head_dim, num_attention_heads=num_heads, max_position_embeddings=8192)
    return [config]
