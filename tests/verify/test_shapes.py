"""Multi-shape verification (Task.shapes): the candidate is checked at each of the problem's other sizes too, and
a kernel specialized to the problem's own sizes is refused there. Real CPU worker pool, Triton interpreter."""

from drtriton_ray.verify import Status, Task

PROBLEM = """import torch
import torch.nn as nn

batch_size = 4
hidden = 24


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2.0


def get_inputs():
    return [torch.randn(batch_size, hidden)]


def get_init_inputs():
    return []
"""

CANDIDATE = """import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu2_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0) * 2.0, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = NUMEL
        relu2_kernel[(triton.cdiv(n, 256),)](x, y, n, BLOCK=256)
        return y
"""
GENERAL = CANDIDATE.replace("NUMEL", "x.numel()")
SPECIALIZED = CANDIDATE.replace("NUMEL", "96")  # the problem's own 4 x 24, written in


def test_a_general_kernel_passes_at_every_shape_and_a_specialized_one_fails_at_the_others(pool):
    shapes = ({"batch_size": 7}, {"batch_size": 1, "hidden": 40})
    general, specialized, unknown = pool.map(
        [
            Task(PROBLEM, GENERAL, shapes=shapes, timing=False),
            Task(PROBLEM, SPECIALIZED, shapes=shapes, timing=False),
            Task(PROBLEM, GENERAL, shapes=({"seq_len": 3},), timing=False),
        ]
    )
    assert general.correct, general.reason
    assert [s["values"] for s in general.shapes] == list(shapes)
    assert any("at shape batch_size=1, hidden=40" in c.name for c in general.checks)
    assert specialized.status == Status.VALUE_MISMATCH.value and "shape batch_size=7" in specialized.reason
    assert Task(PROBLEM, SPECIALIZED).shapes == ()  # the default: the problem's own sizes only
    assert unknown.status == Status.BAD_PROBLEM.value and "no size constant seq_len" in unknown.reason
