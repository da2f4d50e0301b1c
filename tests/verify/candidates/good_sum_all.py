import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def sum_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n, BLOCK):
        o = start + offs
        acc += tl.load(x_ptr + o, mask=o < n, other=0.0)
    tl.store(out_ptr, tl.sum(acc, axis=0))


class ModelNew(nn.Module):
    """A 0-d output from one program."""

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty((), dtype=x.dtype, device=x.device)
        sum_kernel[(1,)](x, out, x.numel(), BLOCK=1024)
        return out
