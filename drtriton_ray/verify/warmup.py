"""A worker's first kernel: proves Triton launches on this device (interpreter or GPU), compiles Triton's launcher
utilities into the worker's own cache, and is imported only after TRITON_INTERPRET is settled."""

import torch
import triton
import triton.language as tl


@triton.jit
def _scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)


def warm_up(device: str) -> None:
    x = torch.arange(100, dtype=torch.float32, device=device)
    y = torch.empty_like(x)
    _scale_kernel[(1,)](x, y, x.numel(), BLOCK=128)
    if not torch.equal(y, x * 2):
        raise RuntimeError(f"Triton self-test kernel gave wrong results on {device}")
