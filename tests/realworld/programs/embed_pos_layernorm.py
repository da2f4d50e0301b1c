"""The embedding layer of BERT / GPT-2: token embeddings + learned position embeddings (positions built in forward),
then LayerNorm."""

import torch
import torch.nn as nn

batch_size = 2
seq_len = 8
vocab = 100
hidden = 32
max_positions = 64
dtype = torch.float32


class Model(nn.Module):
    def __init__(self, vocab, hidden, max_positions):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, hidden)
        self.position_embeddings = nn.Embedding(max_positions, hidden)
        self.norm = nn.LayerNorm(hidden, eps=1e-12)
        self.to(dtype)

    def forward(self, input_ids):
        positions = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
        return self.norm(self.word_embeddings(input_ids) + self.position_embeddings(positions))


def get_inputs():
    return [torch.randint(0, vocab, (batch_size, seq_len))]


def get_init_inputs():
    return [vocab, hidden, max_positions]
