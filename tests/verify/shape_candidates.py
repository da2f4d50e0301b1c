"""relu(x) * 2 as a problem over module-level sizes (batch_size x hidden), its Triton kernel and a candidate that
launches it, for the tests that judge candidates around it (other shapes, the user's own code kept in an answer)."""


def problem_head(hidden: int, imports: str = "") -> str:
    """The problem's imports (`imports`: the user's own, after torch's) and size constants."""
    return f"import torch\nimport torch.nn as nn\n{imports}\nbatch_size = 4\nhidden = {hidden}\n"


def problem(hidden: int, imports: str = "") -> str:
    return (
        problem_head(hidden, imports)
        + "\n\nclass Model(nn.Module):\n    def forward(self, x):\n        return torch.relu(x) * 2.0\n\n\n"
        + "def get_inputs():\n    return [torch.randn(batch_size, hidden)]\n\n\n"
        + "def get_init_inputs():\n    return []\n"
    )


RELU2_KERNEL = """import triton
import triton.language as tl


@triton.jit
def relu2_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0) * 2.0, mask=mask)
"""


def relu2_candidate(numel: str = "x.numel()") -> str:
    """A ModelNew launching the kernel over `numel` elements: x.numel() is general, a number written in is a
    candidate specialized to one size."""
    return (
        "import torch\nimport torch.nn as nn\n"
        + RELU2_KERNEL
        + f"""

class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = {numel}
        relu2_kernel[(triton.cdiv(n, 256),)](x, y, n, BLOCK=256)
        return y
"""
    )
