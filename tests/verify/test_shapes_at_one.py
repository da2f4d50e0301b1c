"""Other shapes at size 1 (a batch of one, a decode step's single token): a kernel wrong only there is caught, and a
shape where the problem itself has no answer (its reference raises, or its output is empty) is skipped with its
reason instead of failing every candidate. Real CPU worker pool, Triton interpreter."""

from shape_candidates import RELU2_KERNEL, problem, relu2_candidate

from drtriton_ray.search.search import other_shapes
from drtriton_ray.verify import Task

PROBLEM = problem(24)  # relu(x) * 2 over (batch_size, hidden) = (4, 24)
SHAPES = other_shapes({"batch_size": 4}, ["batch_size"])  # 5, 8, then 1
HEAD = "import torch\nimport torch.nn as nn\n" + RELU2_KERNEL
GENERAL = relu2_candidate()
# a one-row fast path (one program for the row, as a decode step's GEMV path has) whose block was sized for a
# narrower row: right at every batch but 1, where the row's last 8 of 24 values are never written
ONE_ROW_BUG = GENERAL.replace(
    "        relu2_kernel[(triton.cdiv(",
    "        if x.shape[0] == 1:\n            relu2_kernel[(1,)](x, y, n, BLOCK=16)\n            return y\n"
    "        relu2_kernel[(triton.cdiv(",
)
# x * x[1]: the second row scales every row; a batch of one has no second row, and the reference raises there
SECOND_ROW = problem(24).replace("return torch.relu(x) * 2.0", "return x * x[1]")
SECOND_ROW_KERNEL = (
    HEAD
    + """

@triton.jit
def scale_by_row1_kernel(x_ptr, y_ptr, n, hidden, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    row1 = tl.load(x_ptr + hidden + offs % hidden, mask=mask)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * row1, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        scale_by_row1_kernel[(triton.cdiv(x.numel(), 256),)](x, y, x.numel(), x.shape[1], BLOCK=256)
        return y
"""
)


def test_a_kernel_wrong_only_at_size_one_is_caught_and_a_size_without_an_answer_is_skipped(pool):
    assert SHAPES == ({"batch_size": 5}, {"batch_size": 8}, {"batch_size": 1})
    general, wrong, second_row = pool.verify(
        [
            Task(PROBLEM, GENERAL, shapes=SHAPES, timing=False),
            Task(PROBLEM, ONE_ROW_BUG, shapes=SHAPES, timing=False),
            Task(SECOND_ROW, SECOND_ROW_KERNEL, shapes=SHAPES, timing=False),
        ]
    )
    assert general.correct and general.general, general.reason
    assert [s["ok"] for s in general.shapes] == [True] * 3 and not any(s.get("skipped") for s in general.shapes)
    # right at the problem's own batch and at 5 and 8: only batch 1 shows the bug
    assert wrong.correct and wrong.general is False, wrong.reason
    assert [s["ok"] for s in wrong.shapes] == [True, True, False], wrong.shapes
    assert "shape batch_size=1" in wrong.shapes[2]["reason"] and not wrong.shapes[2].get("skipped")
    # the problem has no answer at batch 1: skipped with the reference's error, and the candidate stays general
    assert second_row.correct and second_row.general, second_row.reason
    skipped = [s for s in second_row.shapes if s.get("skipped")]
    assert [s["values"] for s in skipped] == [{"batch_size": 1}], second_row.shapes
    assert "IndexError" in skipped[0]["reason"], skipped[0]
    assert any(c.name == "general (shape batch_size=1)" and "skipped" in c.detail for c in second_row.checks)
