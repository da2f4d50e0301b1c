"""Slices read in place: SwiGLU on a fused gate_up projection (`gate, up = gate_up.chunk(2, dim=-1)`, the real-world
suite's program) lowers to one kernel that reads gate_up once through the halves' strides, no copy of either half
first; in the Triton interpreter, launches counted, PyTorch's values at its own sizes and at others."""

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from triton.runtime.interpreter import InterpretedFunction

from drtriton_ray.capture import capture_source
from drtriton_ray.lower.emit import lower_program
from drtriton_ray.search.fragments import consumers, make_fragment

SWIGLU = Path(__file__).resolve().parents[1] / "realworld" / "programs" / "swiglu.py"


@pytest.fixture(scope="module")
def swiglu():
    """The SwiGLU program (float32) captured with its batch and sequence dims dynamic, lowered."""
    graph = capture_source(SWIGLU.read_text(), dynamic=["batch_size", "seq_len"])
    assert graph.program.ops == ["Narrow", "Narrow", "Swish", "Mul"]
    frag = make_fragment(graph, 0, len(graph.program.nodes), consumers(graph.program))
    return lower_program(frag.program, frag.source, gpu=None)


def test_swiglu_is_one_kernel_on_views_of_gate_up(swiglu):
    code = swiglu
    forward = [line.strip() for line in code[code.index("def forward") :].splitlines()]
    body = [line for line in forward[1:] if line and not line.startswith("size_")]  # the sizes read from gate_up
    assert body[:2] == ["tensor_1 = tensor_0.narrow(2, 0, 128)", "tensor_2 = tensor_0.narrow(2, 128, 128)"]
    assert body[2].startswith("tensor_4 = fused_2(tensor_1, tensor_2") and body[3:] == ["return tensor_4"]
    assert "strided_copy_kernel" not in code and ".contiguous()" not in code[code.index("def fused_2(") :]


@pytest.mark.parametrize("batch_size, seq_len", [(2, 8), (3, 5), (1, 1)])
def test_swiglu_launches_once_and_gives_pytorchs_values(swiglu, monkeypatch, batch_size, seq_len):
    code = swiglu
    launched = []
    run = InterpretedFunction.run

    def counted(kernel, *args, **kwargs):
        launched.append(kernel.__name__)
        return run(kernel, *args, **kwargs)

    monkeypatch.setattr(InterpretedFunction, "run", counted)
    candidate = {}
    exec(compile(code, "<candidate>", "exec"), candidate)
    torch.manual_seed(0)
    gate_up = torch.randn(batch_size, seq_len, 256)
    got = candidate["ModelNew"]()(gate_up)
    assert launched == ["fused_2_kernel"]
    gate, up = gate_up.chunk(2, dim=-1)
    want = F.silu(gate) * up
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)  # the kernel's sigmoid: PyTorch's but the last bits
