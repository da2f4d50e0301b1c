import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def mul_add_kernel(x_ptr, y_ptr, out_ptr, rows, cols, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    r = tl.arange(0, BLOCK_R)[:, None]
    c = tl.arange(0, BLOCK_C)[None, :]
    mask = (r < rows) & (c < cols)
    x = tl.load(x_ptr + r * cols + c, mask=mask)
    y = tl.load(y_ptr + c, mask=c < cols)  # broadcast along rows
    tl.store(out_ptr + r * cols + c, x * y + x, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        x = x.contiguous()
        out = torch.empty_like(x)
        rows, cols = x.shape
        mul_add_kernel[(1,)](x, y, out, rows, cols, BLOCK_R=triton.next_power_of_2(rows),
                             BLOCK_C=triton.next_power_of_2(cols))
        return out
