"""Mixed precision captured: dtype conversions (`.float()`, `.to(dtype)`, `.type_as(y)`) are the registry's Cast, so
Hugging Face's bfloat16 RMSNorm (transformers' own LlamaRMSNorm, as users import it) is registry operators only and
lowers to one kernel that rounds where the source rounds: the float32 norm to bfloat16, then times the weight. In the
Triton interpreter against the model's PyTorch."""

import types

import torch

from drtriton_ray.capture import capture_source, model_state, run_graph
from drtriton_ray.capture.export import load
from drtriton_ray.ir import TORCH_OP, Graph
from drtriton_ray.lower.emit import lower_program
from drtriton_ray.lower.grouping import kernel_groups
from drtriton_ray.lower.passes import fold_all
from drtriton_ray.search.fragments import consumers, enumerate_fragments, make_fragment

LLAMA = """import torch
import torch.nn as nn
from transformers.models.llama.modeling_llama import LlamaRMSNorm


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = LlamaRMSNorm(64, eps=1e-6).to(torch.bfloat16)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(4, 8, 64, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
"""

CASTS = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, y):
        a = x.float() * 2.0                    # bfloat16 -> float32
        b = a.to(torch.float16)                # float32 -> float16
        c = b.type_as(x)                       # float16 -> bfloat16
        d = x.to(torch.bfloat16) + y.type_as(x)  # no-op casts: the tensors themselves
        return c + d, a.double()               # float64: PyTorch's


def get_inputs():
    return [torch.randn(4, 16, dtype=torch.bfloat16), torch.randn(4, 16, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
"""


def test_dtype_conversions_capture_as_casts():
    graph = capture_source(CASTS)
    nodes = graph.program.nodes
    assert [n.op for n in nodes] == ["Cast", "MulScalar", "Cast", "Cast", "Add", "Add", TORCH_OP]
    assert [n.params["dtype"] for n in nodes if n.op == "Cast"] == ["float32", "float16", "bfloat16"]
    assert nodes[-1].params["target"] == "aten._to_copy.default"  # to float64: the kernels compute in float32
    mod = load(CASTS)
    torch.manual_seed(0)
    model, inputs = mod.Model(), mod.get_inputs()
    got = run_graph(Graph.from_json(graph.to_json()), inputs, model_state(model))
    for g, w in zip(got, model(*inputs)):
        assert g.dtype == w.dtype and torch.equal(g, w)


def run(source: str, code: str, weight=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(the problem's output, the candidate's) on the problem's inputs, the norm's weight (an input of the fragment:
    Hugging Face multiplies by it as an operand) replaced by `weight` if given."""
    problem, candidate = types.ModuleType("problem"), types.ModuleType("candidate")
    exec(compile(source, "<problem>", "exec"), vars(problem))
    exec(compile(code, "<candidate>", "exec"), vars(candidate))
    torch.manual_seed(1)
    inputs = problem.get_inputs()
    if weight is not None:
        inputs = [weight if x.shape == weight.shape else x for x in inputs]
    return problem.Model()(*inputs), candidate.ModelNew()(*inputs)


def test_a_bfloat16_llama_rms_norm_is_one_kernel_rounding_as_pytorch():
    graph = capture_source(LLAMA)
    ops = ["Cast", "Square", "Mean", "AddScalar", "Rsqrt", "Mul", "Cast", "Mul"]
    assert graph.program.ops == ops and not graph.notes
    frag = make_fragment(graph, 0, len(ops), consumers(graph.program))
    folded = fold_all(frag.program)
    # the norm reads x in bfloat16 and computes in float32; the cast back and the weight are its kernel's epilogue
    assert folded.ops == ["RMSNorm", "Cast", "Mul"] and folded.nodes[0].inputs == frag.program.nodes[0].inputs
    groups = kernel_groups(folded)
    assert [(g.anchor, g.epilogue) for g in groups] == [(0, [1, 2])]
    code = lower_program(frag.program, frag.source, gpu=None)
    forward = code[code.index("def forward") :]
    assert forward.count("fused_") == 1 and "round_bf16(val)" in code
    want, got = run(frag.source, code)
    assert got.dtype == want.dtype == torch.bfloat16
    torch.testing.assert_close(got, want, rtol=2**-7, atol=0)  # the interpreter's store to bfloat16 truncates
    # weights that are powers of two: the rounded norm times one is exact in bfloat16, so no store rounds and the
    # kernel's values are PyTorch's bit for bit, where the unrounded norm times the weight would be truncated
    torch.manual_seed(2)
    weight = (2.0 ** torch.randint(-2, 3, (64,))).to(torch.bfloat16)
    want, got = run(frag.source, code, weight)
    assert torch.equal(got, want)


INT_CASTS = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, position_ids, mask, x):
        angles = position_ids.float() * 0.5    # int64 -> float32: a Cast (Hugging Face's rotary)
        keep = mask.float() * x                # bool -> float32: a Cast
        return angles + keep, position_ids.to(torch.bfloat16)  # an integer to 16 bits: PyTorch's


def get_inputs():
    return [torch.arange(16).reshape(2, 8), torch.rand(2, 8) < 0.5, torch.randn(2, 8)]


def get_init_inputs():
    return []
"""


def test_integer_and_boolean_widenings_capture_as_casts(tmp_path):
    """position_ids.float() and mask.float() are Casts to float32, lowered to one kernel with their users; an
    integer to bf16 stays PyTorch's (its float32 step would round twice past 2^24). Values exact."""
    graph = capture_source(INT_CASTS)
    nodes = graph.program.nodes
    assert [n.op for n in nodes] == ["Cast", "MulScalar", "Cast", "Mul", "Add", TORCH_OP]
    mod = load(INT_CASTS)
    model, inputs = mod.Model(), mod.get_inputs()
    got = run_graph(Graph.from_json(graph.to_json()), inputs, model_state(model))
    for g, w in zip(got, model(*inputs)):
        assert g.dtype == w.dtype and torch.equal(g, w)
    ops = ["Cast", "MulScalar", "Cast", "Mul", "Add"]
    (frag,) = [f for f in enumerate_fragments(graph) if [n.op for n in f.program.nodes] == ops]
    code = lower_program(frag.program, frag.source)
    assert len(kernel_groups(fold_all(frag.program))) == 1
    problem, candidate = types.ModuleType("problem"), types.ModuleType("candidate")
    exec(compile(frag.source, "<problem>", "exec"), vars(problem))
    path = tmp_path / "int_casts.py"
    path.write_text(code)
    exec(compile(code, str(path), "exec"), vars(candidate))
    args = problem.get_inputs()
    torch.testing.assert_close(candidate.ModelNew()(*args), problem.Model()(*args), atol=1e-6, rtol=1e-6)
