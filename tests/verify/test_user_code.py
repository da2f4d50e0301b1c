"""The user's own code in an answer (an import, a helper, Model.forward kept for other shapes) passes the static
rules as the problem does, and cannot be abused: a candidate that always takes the kept forward is caught at run
time. Real CPU worker pool, Triton interpreter."""

from shape_candidates import RELU2_KERNEL, problem, problem_head

from drtriton_ray.verify import Status, Task

PROBLEM = problem(32, "import collections.abc\n")
KERNEL = (
    problem_head(32, "import collections.abc\n")
    + RELU2_KERNEL
    + """

class ModelNew(nn.Module):
    def drt_original_forward(self, x):
        return torch.relu(x) * 2.0

    def forward(self, x):
        y = torch.empty_like(x)
        relu2_kernel[(triton.cdiv(x.numel(), 256),)](x, y, x.numel(), BLOCK=256)
        return BODY
"""
)
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
