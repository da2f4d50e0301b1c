import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def max_kernel(x_ptr, values_ptr, indices_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * cols + offs, mask=offs < cols, other=-float("inf"))
    value, index = tl.max(x, axis=0, return_indices=True)
    tl.store(values_ptr + row, value)
    tl.store(indices_ptr + row, index.to(tl.int64))


class ModelNew(nn.Module):
    """Two outputs of two dtypes from one kernel."""

    def forward(self, x):
        x = x.contiguous()
        values = torch.empty((x.shape[0],), dtype=x.dtype, device=x.device)
        indices = torch.empty((x.shape[0],), dtype=torch.int64, device=x.device)
        max_kernel[(x.shape[0],)](x, values, indices, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
        return values, indices
