"""The ReLU problem and the Triton candidates (right, and each with one mistake a model makes) that the eval
tests grade."""

PROBLEM = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(SHAPE)]


def get_init_inputs():
    return []
"""

CANDIDATE = """
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, RANGE)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, RESULT, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), BLOCK_SIZE),)](x, y, x.numel(), BLOCK=BLOCK_SIZE)
        return RETURN
"""


def problem(shape: str = "37, 53") -> str:
    return PROBLEM.replace("SHAPE", shape)


def candidate(result="tl.maximum(x, 0.0)", block="4096", ret="y", head="", arange="BLOCK") -> str:
    """`arange="n"`: tl.arange with a run-time bound, which Triton refuses to compile."""
    return head + CANDIDATE.replace("RESULT", result).replace("BLOCK_SIZE", block).replace("RETURN", ret).replace(
        "RANGE", arange
    )
