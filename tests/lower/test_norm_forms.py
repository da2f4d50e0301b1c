"""Norms as users write them: an RMS norm written out (Llama's, T5's: six operators) lowers to one RMS norm kernel,
and a norm's own epsilon (BERT's 1e-12, Llama's 1e-6, a GroupNorm's 1e-6) is captured, rendered and lowered rather
than the program staying in PyTorch. In the Triton interpreter against the problem's PyTorch."""

import types

import pytest
import torch

from drtriton_ray.capture.export import capture_source
from drtriton_ray.lower.emit import lower_program
from drtriton_ray.search.fragments import consumers, make_fragment

HEAD = "import torch\nimport torch.nn as nn\n\nbatch_size = 2\nseq_len = 4\nhidden = 32\n\n\n"
TAIL = (
    "\n\ndef get_inputs():\n    return [torch.randn(batch_size, seq_len, hidden)]\n\n\n"
    "def get_init_inputs():\n    return []\n"
)

LLAMA = """class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))

    def forward(self, x):
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + 1e-6))
"""
# Meta's: the float32 upcast and `.type_as(x)` of a float32 program are no operators at all
META = LLAMA.replace(
    "return self.weight * (x * torch.rsqrt(variance + 1e-6))",
    "return (x.float() * torch.rsqrt(variance + 1e-6)).type_as(x) * self.weight",
)
# the statistics over the batch, not the row: not an RMS norm
ACROSS_ROWS = LLAMA.replace("mean(-1, keepdim=True)", "mean(0, keepdim=True)")
BERT = """class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, x):
        return self.norm(x * 1e-3)
"""
GROUPS = """class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.GroupNorm(2, seq_len, eps=1e-6)

    def forward(self, x):
        return torch.nn.functional.silu(self.norm(x * 1e-3))
"""


def lowered(body: str):
    source = HEAD + body + TAIL
    graph = capture_source(source, dynamic=["batch_size"])
    frag = make_fragment(graph, 0, len(graph.program.nodes), consumers(graph.program))
    return frag, lower_program(frag.program, frag.source, gpu=None)


def check(frag, code: str, sizes: dict) -> None:
    problem, candidate = types.ModuleType("problem"), types.ModuleType("candidate")
    exec(compile(frag.source, "<problem>", "exec"), vars(problem))
    exec(compile(code, "<candidate>", "exec"), vars(candidate))
    vars(problem).update(sizes)
    torch.manual_seed(0)
    ref = problem.Model()
    torch.manual_seed(0)
    new = candidate.ModelNew()
    inputs = problem.get_inputs()
    torch.testing.assert_close(new(*inputs), ref(*inputs), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("body", [LLAMA, META], ids=["llama", "meta"])
def test_a_written_out_rms_norm_is_one_kernel(body):
    frag, code = lowered(body)
    assert [n.op for n in frag.program.nodes] == ["Square", "Mean", "AddScalar", "Rsqrt", "Mul", "Mul"]
    forward = code[code.index("def forward") :]
    assert "rms_norm(tensor_0, tensor_1, eps=1e-06)" in forward and forward.count("(") == 2, forward
    for sizes in ({}, {"batch_size": 5}):
        check(frag, code, sizes)


def test_statistics_over_another_dim_are_not_folded():
    frag, code = lowered(ACROSS_ROWS)
    assert "rms_norm(" not in code[code.index("def forward") :]
    check(frag, code, {})


@pytest.mark.parametrize("body, op, eps", [(BERT, "LayerNorm", 1e-12), (GROUPS, "GroupNorm", 1e-6)])
def test_a_norms_own_epsilon_is_kept(body, op, eps):
    frag, code = lowered(body)
    norm = next(n for n in frag.program.nodes if n.op == op)
    assert norm.params["eps"] == eps and f"eps={eps!r})" in frag.source
    assert f"eps={eps!r}" in code
    check(frag, code, {"batch_size": 3})
