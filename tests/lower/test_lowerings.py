"""The operator registrations (lower/lowerings.py): every registry operator is lowered by exactly one of them (an
elementwise expression or a Lowering), and a new operator is one registration."""

import pytest

from drtriton_ray.ir import Node, Program, Tensor
from drtriton_ray.lower import tuning
from drtriton_ray.lower.elementwise import is_elementwise
from drtriton_ray.lower.emit import NotLowerable, lower_program
from drtriton_ray.lower.lowerings import LOWERINGS, register
from drtriton_ray.ops import REGISTRY

SOURCE = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, tensor_0):
        return tensor_0.flatten(1)
"""


def test_every_operator_has_one_lowering():
    for op in REGISTRY:
        assert is_elementwise(op) != (op in LOWERINGS), op
    assert {"NormReduce", "SoftmaxReduce"} <= set(LOWERINGS)  # the lowering's own fused nodes (lower/passes.py)


def test_fusing_operators_have_a_kernel():
    """An operator that may take a prologue or an epilogue names the library kernel it is fused into."""
    for op, lowering in LOWERINGS.items():
        fuses = lowering.prologue or lowering.epilogue(Node(op, [0], [1], {"op": "Sum"}))
        assert not fuses or lowering.kernel is not None, op


def test_one_registration_lowers_a_new_operator(monkeypatch):
    """A reshape operator the registry does not have: not lowerable, then lowered by one registration; its
    tuning key is what the registration says."""
    tensors = {0: Tensor(0, [2, 3, 4], "float32", "input"), 1: Tensor(1, [2, 12], "float32", "output")}
    prog = Program([Node("Flatten", [0], [1], {"shape": [2, 12]})], tensors, "float32", 0)
    with pytest.raises(NotLowerable):
        lower_program(prog, SOURCE, gpu=None)
    monkeypatch.setitem(LOWERINGS, "Flatten", LOWERINGS["View"])  # the entry goes again after the test
    register("Flatten", call=lambda s: f"reshape_view({s.x[0]}, {tuple(s.params['shape'])})", takes_config=False)
    code = lower_program(prog, SOURCE, gpu=None)
    assert "tensor_1 = reshape_view(tensor_0, (2, 12))" in code and "def reshape_view" in code
    assert tuning.kernel_dims("Flatten", {}, [[2, 3, 4]], [2, 12]) is None
