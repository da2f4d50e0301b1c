import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_sum_kernel(x_ptr, out_ptr, rows, cols, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    r = tl.arange(0, BLOCK_R)[:, None]
    c = tl.arange(0, BLOCK_C)[None, :]
    x = tl.load(x_ptr + r * cols + c, mask=(r < rows) & (c < cols), other=0.0)
    r1 = tl.arange(0, BLOCK_R)
    tl.store(out_ptr + r1, tl.sum(x, axis=1), mask=r1 < rows)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        x = x.contiguous()
        rows, cols = x.shape
        out = torch.empty((rows,), dtype=x.dtype, device=x.device)
        row_sum_kernel[(1,)](x, out, rows, cols, BLOCK_R=triton.next_power_of_2(rows),
                             BLOCK_C=triton.next_power_of_2(cols))
        return out
