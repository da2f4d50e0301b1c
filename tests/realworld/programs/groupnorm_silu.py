"""A diffusion UNet's ResNet block norm: GroupNorm(32 groups) then SiLU (Stable Diffusion's ResnetBlock2D)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 2
channels = 64
size = 8
groups = 32
dtype = torch.float32


class Model(nn.Module):
    def __init__(self, channels, groups):
        super().__init__()
        self.norm = nn.GroupNorm(groups, channels, eps=1e-6)
        self.to(dtype)

    def forward(self, x):
        return F.silu(self.norm(x))


def get_inputs():
    return [torch.randn(batch_size, channels, size, size, dtype=dtype)]


def get_init_inputs():
    return [channels, groups]
