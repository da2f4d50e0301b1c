import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        y = x * 2
        raise ValueError("this model refuses to run")
        return y


def get_inputs():
    return [torch.randn(4)]


def get_init_inputs():
    return []
