"""A matmul over one fixed element (Hugging Face's rotary angles: `inv_freq[:, None] @ positions[None, :]`) is an
outer product: captured as the broadcast Mul it equals, so it fuses with the cos/sin after it. A contraction over
more than one element, or over a dim that varies, stays a Matmul. Replayed against the model's PyTorch, bit for bit."""

import pytest
import torch

from drtriton_ray.capture import capture_source, model_state, run_graph
from drtriton_ray.capture.export import load
from drtriton_ray.capture.aten import unit_contraction
from drtriton_ray.ir import Graph, Tensor

OUTER = """import torch
import torch.nn as nn
batch_size, m, n, k = 2, 64, 16, {k}


class Model(nn.Module):
    def forward(self, a, b):
        return torch.cos(torch.{fn}(a, b))


def get_inputs():
    return [torch.randn(batch_size, m, k, dtype=torch.{dtype}), torch.randn(batch_size, k, n, dtype=torch.{dtype})]


def get_init_inputs():
    return []
"""


@pytest.mark.parametrize("fn", ["matmul", "bmm"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_product_over_one_element_is_a_broadcast_mul(fn, dtype):
    source = OUTER.format(k=1, fn=fn, dtype=dtype)
    graph = capture_source(source)
    assert [n.op for n in graph.program.nodes] == ["Mul", "Cos"]
    mod = load(source)
    torch.manual_seed(0)
    inputs = mod.get_inputs()
    (got,) = run_graph(Graph.from_json(graph.to_json()), inputs, model_state(mod.Model()))
    want = mod.Model()(*inputs)
    assert got.dtype == want.dtype and torch.equal(got, want)


def test_a_product_over_more_elements_stays_a_matmul():
    assert [n.op for n in capture_source(OUTER.format(k=4, fn="matmul", dtype="float32")).program.nodes] == [
        "Matmul",
        "Cos",
    ]


def test_a_contraction_over_a_varying_dim_stays_a_matmul():
    # export fixes a dim sampled at 1, so a varying K reaches the mapper only from a graph built elsewhere
    a = Tensor(0, [2, 64, 1], "float32", "input", sym=["batch_size", "", "k"])
    b = Tensor(1, [2, 1, 16], "float32", "input", sym=["batch_size", "k", ""])
    assert not unit_contraction(a, b)
    assert unit_contraction(Tensor(0, [2, 64, 1], "float32", "input"), Tensor(1, [2, 1, 16], "float32", "input"))
