import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Conv2d, BatchNorm2d (training mode: batch statistics), ReLU, MaxPool2d."""

    def __init__(self, cin=3, cout=8):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel_size=3, padding=1)
        self.bn = nn.BatchNorm2d(cout)

    def forward(self, x):
        x = F.relu(self.bn(self.conv(x)))
        return F.max_pool2d(x, 2)


def get_inputs():
    return [torch.randn(2, 3, 8, 8)]


def get_init_inputs():
    return [3, 8]
