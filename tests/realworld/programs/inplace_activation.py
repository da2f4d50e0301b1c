"""ResNet/VGG-style in-place activations on a conv output: nn.ReLU(inplace=True) and F.relu_, with an in-place
scale of the features."""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size, planes, size = 2, 8, 8
dtype = torch.float32


def conv3x3(in_planes, out_planes):
    """3x3 convolution with padding (torchvision's resnet.py)"""
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, padding=1, dtype=dtype)


class Model(nn.Module):
    def __init__(self, planes):
        super().__init__()
        self.conv1 = conv3x3(planes, planes)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        out = self.relu(self.conv1(x))
        out.mul_(2.0)
        return F.relu_(out - 1.0)


def get_inputs():
    return [torch.randn(batch_size, planes, size, size, dtype=dtype)]


def get_init_inputs():
    return [planes]
