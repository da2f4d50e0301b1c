import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def partial_sum_kernel(x_ptr, out_ptr, cols, BLOCK: tl.constexpr):
    # one program per (row, column block); the partial sums meet in the output through atomic adds
    row = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    part = tl.sum(tl.load(x_ptr + row * cols + offs, mask=offs < cols, other=0.0), axis=0)
    tl.atomic_add(out_ptr + row, part)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        x = x.contiguous()
        out = torch.zeros((x.shape[0],), dtype=x.dtype, device=x.device)
        partial_sum_kernel[(x.shape[0], triton.cdiv(x.shape[1], 16))](x, out, x.shape[1], BLOCK=16)
        return out
