"""The embedding layer of BERT / GPT-2: token embeddings + learned position embeddings (positions built in forward),
then LayerNorm."""

import torch
import torch.nn as nn

batch_size, seq_len = 2, 8
vocab_size, hidden_size, max_position_embeddings = 100, 32, 64
dtype = torch.float32


class Model(nn.Module):
    def __init__(self, vocab_size, hidden_size, max_position_embeddings, layer_norm_eps=1e-12):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, hidden_size, dtype=dtype)
        self.position_embeddings = nn.Embedding(max_position_embeddings, hidden_size, dtype=dtype)
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=layer_norm_eps, dtype=dtype)

    def forward(self, input_ids):
        position_ids = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
        embeddings = self.word_embeddings(input_ids) + self.position_embeddings(position_ids)
        return self.LayerNorm(embeddings)


def get_inputs():
    return [torch.randint(0, vocab_size, (batch_size, seq_len))]


def get_init_inputs():
    return [vocab_size, hidden_size, max_position_embeddings]
