import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def layernorm_kernel(x_ptr, y_ptr, cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    x = tl.load(x_ptr + row * cols + offs, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / cols
    d = tl.where(mask, x - mean, 0.0)
    var = tl.sum(d * d, axis=0) / cols
    tl.store(y_ptr + row * cols + offs, (d / tl.sqrt(var + eps)).to(tl.bfloat16), mask=mask)


class ModelNew(nn.Module):
    """Mixed precision as the problem: bfloat16 in, float32 inside, bfloat16 out."""

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        layernorm_kernel[(x.shape[0],)](x, y, x.shape[1], 1e-5, BLOCK=triton.next_power_of_2(x.shape[1]))
        return y
