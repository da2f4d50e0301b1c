import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


@triton.jit
def relu_in_place_kernel(y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(y_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    """Copies the input into its own output buffer, then applies ReLU in place there."""

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        grid = (triton.cdiv(x.numel(), 1024),)
        copy_kernel[grid](x, y, x.numel(), BLOCK=1024)
        relu_in_place_kernel[grid](y, x.numel(), BLOCK=1024)
        return y
