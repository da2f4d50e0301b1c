"""Symbolic dims in the lowering (lower/symbolic.py): a program captured with sizes that vary lowers to code that
reads those sizes from its inputs, so one lowered module is right at every batch and sequence length, in the Triton
interpreter against the problem's PyTorch at other values of its size constants."""

import types

import pytest
import torch

from drtriton_ray.capture.export import capture_source
from drtriton_ray.lower.emit import lower_program
from drtriton_ray.ir.program import Size
from drtriton_ray.lower.symbolic import binding_lines, pass_sizes, with_sizes
from drtriton_ray.search.fragments import consumers, make_fragment

RMSNORM = """
import torch
import torch.nn as nn

batch_size = 2
seq_len = 3
hidden = 16


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden)]


def get_init_inputs():
    return []
"""

# a broadcast over heads and a reduction along the sequence: sizes in the middle of a shape, a transposed read
HEADS_SOFTMAX = """
import torch
import torch.nn as nn

batch_size = 2
heads = 3
seq_len = 5


class Model(nn.Module):
    def forward(self, scores, bias):
        return torch.softmax(scores.transpose(1, 2) + bias, dim=1)


def get_inputs():
    return [torch.randn(batch_size, heads, seq_len, 8), torch.randn(seq_len, heads, 8)]


def get_init_inputs():
    return []
"""


def whole(source: str, dynamic):
    """The captured program as one fragment (every node), with its problem source."""
    graph = capture_source(source, dynamic=dynamic)
    return make_fragment(graph, 0, len(graph.program.nodes), consumers(graph.program)), graph


def module(source: str, name: str, sizes: dict | None = None):
    m = types.ModuleType(name)
    exec(compile(source, f"<{name}>", "exec"), m.__dict__)
    vars(m).update(sizes or {})
    return m


def outputs(problem, code: str):
    torch.manual_seed(0)
    ref = problem.Model(*problem.get_init_inputs())
    torch.manual_seed(0)
    new = module(code, "candidate").ModelNew(*problem.get_init_inputs())
    inputs = problem.get_inputs()
    return ref(*inputs), new(*inputs)


@pytest.mark.parametrize(
    "source, dynamic, others",
    [
        (RMSNORM, ("batch_size", "seq_len"), [{"batch_size": 3, "seq_len": 7}, {"batch_size": 1, "seq_len": 1}]),
        (HEADS_SOFTMAX, ("batch_size", "seq_len"), [{"batch_size": 1, "seq_len": 9}, {"batch_size": 4, "seq_len": 2}]),
    ],
    ids=["rmsnorm", "heads_softmax"],
)
def test_one_lowered_module_is_right_at_other_sizes(source, dynamic, others):
    frag, graph = whole(source, dynamic)
    assert set(graph.dims) == set(dynamic), graph.notes
    code = lower_program(frag.program, frag.source, gpu=None)
    for sizes in [{}] + others:
        ref, new = outputs(module(frag.source, "problem", sizes), code)
        assert new.shape == ref.shape, sizes
        torch.testing.assert_close(new, ref, rtol=1e-4, atol=1e-5, msg=f"at {sizes}")


def test_fixed_dims_stay_constants_and_unbound_sizes_stay_numbers():
    """Only symbolic dims become sizes; a program without them lowers exactly as before (no binding lines)."""
    frag, graph = whole(RMSNORM, ())
    assert graph.dims == {}
    code = lower_program(frag.program, frag.source, gpu=None)
    assert "size_" not in code
    scaled = RMSNORM.replace("x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight", "x * self.weight")
    frag, _ = whole(scaled, ("batch_size", "seq_len"))
    code = lower_program(frag.program, frag.source, gpu=None)
    assert "size_batch_size = tensor_0.shape[0]" in code and "(size_batch_size, size_seq_len, 16)" in code, code
    frag, _ = whole(RMSNORM, ("batch_size", "seq_len"))
    p = with_sizes(frag.program)
    x = p.tensors[p.inputs[0]]
    assert [repr(d) for d in x.shape] == ["size_batch_size", "size_seq_len", "16"]
    assert isinstance(x.shape[0], Size) and x.shape[0] == 2 and not isinstance(x.shape[2], Size)
    # an input dim whose expression names a size no input dim gives alone is read whole; a dim of another expression
    # of that size (the batch alone) then keeps its sample value
    p = frag.program
    for t in p.tensors.values():
        t.sym = ["batch_size*seq_len" if s else "" for s in t.dim_names()] if t.sym else []
    p.tensors[p.outputs[0]].sym = ["batch_size", "", ""]
    sized = with_sizes(p)
    assert repr(sized.tensors[p.inputs[0]].shape[0]) == "size_batch_size_x_seq_len"
    assert not isinstance(sized.tensors[p.outputs[0]].shape[0], Size)
    assert binding_lines(sized, "size_batch_size_x_seq_len") == ["size_batch_size_x_seq_len = tensor_0.shape[0]"]


def test_wrappers_take_the_sizes_they_read():
    src = "def fused_0(x0):\n    out = flat_args((size_batch_size, 4), x0)\n"
    src, line = pass_sizes(src, "tensor_3 = fused_0(tensor_1)", "fused_0", ["size_batch_size"])
    assert (
        src.startswith("def fused_0(x0, size_batch_size):") and line == "tensor_3 = fused_0(tensor_1, size_batch_size)"
    )
    assert pass_sizes("def f():\n", "t = f()", "f", ["size_a"]) == ("def f(size_a):\n", "t = f(size_a)")
