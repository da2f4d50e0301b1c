"""ResNet/VGG-style in-place activations on a conv output: nn.ReLU(inplace=True) and F.relu_, with an in-place
scale of the features."""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 2
channels = 8
size = 8
dtype = torch.float32


class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)
        self.act = nn.ReLU(inplace=True)
        self.to(dtype)

    def forward(self, x):
        h = self.act(self.conv(x))
        h.mul_(2.0)
        return F.relu_(h - 1.0)


def get_inputs():
    return [torch.randn(batch_size, channels, size, size, dtype=dtype)]


def get_init_inputs():
    return [channels]
