import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_sum_kernel(x_ptr, out_ptr, rows, cols, PROGRAMS: tl.constexpr, BLOCK: tl.constexpr):
    # a persistent grid: a fixed number of programs, each looping over the rows it owns
    offs = tl.arange(0, BLOCK)
    for row in range(tl.program_id(0), rows, PROGRAMS):
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(0, cols, BLOCK):
            o = start + offs
            acc += tl.load(x_ptr + row * cols + o, mask=o < cols, other=0.0)
        tl.store(out_ptr + row, tl.sum(acc, axis=0))


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty((x.shape[0],), dtype=x.dtype, device=x.device)
        row_sum_kernel[(4,)](x, out, x.shape[0], x.shape[1], PROGRAMS=4, BLOCK=32)
        return out
