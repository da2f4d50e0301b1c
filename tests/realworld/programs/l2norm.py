"""L2-normalised embeddings (CLIP, sentence-transformers, QK-norm): F.normalize over the last dim."""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size, hidden = 16, 64
dtype = torch.float32


class Model(nn.Module):
    def forward(self, embeddings):
        return F.normalize(embeddings, p=2, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, hidden, dtype=dtype)]


def get_init_inputs():
    return []
