"""A diffusion UNet's ResNet block norm: GroupNorm(32 groups) then SiLU, as diffusers' ResnetBlock2D opens its
forward (norm1, nonlinearity)."""

import torch
from torch import nn

batch_size, in_channels, size = 2, 64, 8
groups = 32
dtype = torch.float32


class Model(nn.Module):
    def __init__(self, in_channels, groups, eps=1e-6):
        super().__init__()
        self.norm1 = torch.nn.GroupNorm(num_groups=groups, num_channels=in_channels, eps=eps, affine=True)
        self.nonlinearity = nn.SiLU()
        self.to(dtype)

    def forward(self, input_tensor):
        hidden_states = self.norm1(input_tensor)
        hidden_states = self.nonlinearity(hidden_states)
        return hidden_states


def get_inputs():
    return [torch.randn(batch_size, in_channels, size, size, dtype=dtype)]


def get_init_inputs():
    return [in_channels, groups]
