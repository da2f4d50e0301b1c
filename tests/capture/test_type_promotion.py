"""Type promotion captured: a registry binary operator on floats of two dtypes (bfloat16 or float16 with float32)
is PyTorch's widening of the narrower operand (a Cast to float32, one per tensor, an explicit `.float()` of it
reused) and the operator in float32. So Hugging Face's T5LayerNorm in bfloat16 (`hidden_states *
torch.rsqrt(variance)`, a bfloat16 tensor times a float32 one) is registry operators only and lowers to one kernel,
in the Triton interpreter PyTorch's values bit for bit at its own sizes and at others."""

from pathlib import Path

import pytest
import torch

from drtriton_ray.capture import capture_source, model_state, run_graph
from drtriton_ray.capture.export import load
from drtriton_ray.eval.realworld import with_constants
from drtriton_ray.ir import TORCH_OP, Graph
from drtriton_ray.lower.emit import lower_program
from drtriton_ray.search.fragments import consumers, make_fragment

REALWORLD = Path(__file__).resolve().parents[1] / "realworld" / "programs"

MIXED = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, y, h, s):
        f = x.float()              # an explicit cast
        a = x * y                  # bfloat16 * float32: x widened, by the cast above
        b = y - h                  # float32 - float16: h widened
        c = torch.maximum(x, h)    # bfloat16 and float16: both widened to float32, by the casts above
        d = f + a / x
        e = x * s                  # a 0-dim float32 tensor: the result stays bfloat16, PyTorch's
        return b + c + d, e


def get_inputs():
    return [torch.randn(4, 16, dtype=torch.bfloat16), torch.randn(4, 16), torch.randn(4, 16, dtype=torch.float16),
            torch.tensor(1.5)]


def get_init_inputs():
    return []
"""


def test_mixed_float_operands_capture_as_casts_and_replay_exactly():
    graph = capture_source(MIXED)
    ops = graph.program.ops
    assert ops == ["Cast", "Mul", "Cast", "Sub", "Maximum", "Div", "Add", TORCH_OP, "Add", "Add"]
    (x, y, h, s), (f, a, g, b, c, d, _, e, _, _) = graph.program.inputs, graph.program.nodes
    assert (f.inputs, g.inputs, g.params) == ([x], [h], {"dtype": "float32"})
    assert a.inputs == [f.outputs[0], y] and b.inputs == [y, g.outputs[0]] and c.inputs == f.outputs + g.outputs
    assert d.inputs == [a.outputs[0], f.outputs[0]]
    assert e.params["target"] == "aten.mul.Tensor" and e.inputs == [x, s]  # the bfloat16 result: no widening
    mod = load(MIXED)
    inputs = mod.get_inputs()
    got = run_graph(Graph.from_json(graph.to_json()), inputs, model_state(mod.Model()))
    for g, w in zip(got, mod.Model()(*inputs)):
        assert g.dtype == w.dtype and torch.equal(g, w)


@pytest.fixture(scope="module")
def t5():
    """(the bfloat16 T5LayerNorm's source, its whole graph as a fragment, the fragment lowered)."""
    source = with_constants((REALWORLD / "hf_t5_layernorm.py").read_text(), {"dtype": "bfloat16"})
    graph = capture_source(source, dynamic=["batch_size", "seq_len"])
    frag = make_fragment(graph, 0, len(graph.program.nodes), consumers(graph.program))
    return source, graph, frag, lower_program(frag.program, frag.source, gpu=None)


def test_bfloat16_t5_layer_norm_is_one_kernel(t5):
    _, graph, frag, code = t5
    # the same program as LlamaRMSNorm's: x.to(float32) read by the square and (widened again) by the product
    assert graph.program.ops == ["Cast", "Square", "Mean", "AddScalar", "Rsqrt", "Mul", "Cast", "Mul"]
    assert graph.program.nodes[5].inputs[0] == graph.program.nodes[0].outputs[0] and not graph.notes
    forward = code[code.index("def forward") :]
    assert forward.count("fused_") == 1 and "row_norm" in code  # one launch: the norm, its cast and weight fused


@pytest.mark.parametrize("batch_size, seq_len", [(2, 8), (3, 5), (1, 1)])
def test_bfloat16_t5_layer_norm_is_pytorchs_bit_for_bit(t5, batch_size, seq_len):
    source, _, frag, code = t5
    problem = load(with_constants(source, {"batch_size": batch_size, "seq_len": seq_len}))
    candidate = {}
    exec(compile(code, "<candidate>", "exec"), candidate)
    torch.manual_seed(0)
    model = problem.Model(*problem.get_init_inputs())
    torch.manual_seed(1)
    (x,) = problem.get_inputs()
    weight = model.final_layer_norm.weight  # ones: the rounded norm times it is exact, no store of the kernel rounds
    assert frag.inputs == [0, 1]  # the hidden states and the weight (an operand of the product)
    with torch.no_grad():
        want = model(x)
    got = candidate["ModelNew"]()(x, weight)
    assert got.dtype == want.dtype == torch.bfloat16 and torch.equal(got, want)
    torch.manual_seed(2)  # weights that are powers of two: still exact in bfloat16
    weight = (2.0 ** torch.randint(-2, 3, weight.shape)).to(torch.bfloat16)
    with torch.no_grad():
        model.final_layer_norm.weight.copy_(weight)
        assert torch.equal(candidate["ModelNew"]()(x, weight), model(x))
