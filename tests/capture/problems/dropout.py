import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Linear, Dropout (random in training mode, the identity in eval mode), ReLU."""

    def __init__(self, hidden=32):
        super().__init__()
        self.fc = nn.Linear(hidden, hidden)
        self.drop = nn.Dropout(0.25)

    def forward(self, x):
        return F.relu(self.drop(self.fc(x)))


def get_inputs():
    return [torch.randn(4, 32)]


def get_init_inputs():
    return [32]
