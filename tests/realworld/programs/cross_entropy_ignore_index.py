"""A causal LM head and its loss as Hugging Face computes it: logits = lm_head(h), labels shifted by one with padded
positions set to -100, cross_entropy(ignore_index=-100)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size, seq_len = 2, 8
hidden_size, vocab_size = 32, 96
dtype = torch.float32


class Model(nn.Module):
    def __init__(self, hidden_size, vocab_size):
        super().__init__()
        self.lm_head = nn.Linear(hidden_size, vocab_size, bias=False, dtype=dtype)

    def forward(self, hidden_states, labels):
        logits = self.lm_head(hidden_states).float()
        shift_logits = logits[:, :-1, :].reshape(-1, logits.shape[-1])
        shift_labels = labels[:, 1:].reshape(-1)
        return F.cross_entropy(shift_logits, shift_labels, ignore_index=-100)


def get_inputs():
    labels = torch.randint(0, vocab_size, (batch_size, seq_len))
    padded = torch.rand(batch_size, seq_len) < 0.25
    padded[:, 1] = False  # every row keeps a real token to predict
    labels = torch.where(padded, torch.full_like(labels, -100), labels)
    return [torch.randn(batch_size, seq_len, hidden_size, dtype=dtype), labels]


def get_init_inputs():
    return [hidden_size, vocab_size]
