"""The user's own code in an answer (an import, a helper, Model.forward kept for other shapes) passes the static
rules as the problem does, and cannot be abused: a candidate that always takes the kept forward is caught at run
time. Real CPU worker pool, Triton interpreter."""

from drtriton_ray.verify import Status, Task

PROBLEM = """import torch
import torch.nn as nn
import collections.abc

batch_size = 4
hidden = 32


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2.0


def get_inputs():
    return [torch.randn(batch_size, hidden)]


def get_init_inputs():
    return []
"""

KERNEL = """import torch
import torch.nn as nn
import collections.abc

batch_size = 4
hidden = 32
import triton
import triton.language as tl


@triton.jit
def relu2_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0) * 2.0, mask=mask)


class ModelNew(nn.Module):
    def drt_original_forward(self, x):
        return torch.relu(x) * 2.0

    def forward(self, x):
        y = torch.empty_like(x)
        relu2_kernel[(triton.cdiv(x.numel(), 256),)](x, y, x.numel(), BLOCK=256)
        return BODY
"""
HONEST = KERNEL.replace("BODY", "y if x.shape == (batch_size, hidden) else self.drt_original_forward(x)")
BYPASS = KERNEL.replace("BODY", "self.drt_original_forward(x)")  # a decoy launch, the answer from PyTorch


def test_the_kept_forward_passes_as_user_code_and_a_bypass_through_it_is_caught(pool):
    honest, strict_bypass, hybrid_bypass = pool.verify(
        [
            Task(PROBLEM, HONEST, timing=False),
            Task(PROBLEM, BYPASS, timing=False),
            Task(PROBLEM, BYPASS, policy="hybrid", timing=False),
        ]
    )
    assert honest.correct, honest.reason  # `import collections.abc` is the user's: outside the allow-list otherwise
    assert strict_bypass.status == Status.TORCH_COMPUTE.value, strict_bypass.reason
    assert not hybrid_bypass.correct and hybrid_bypass.status == Status.NOT_FAITHFUL.value, hybrid_bypass.reason
