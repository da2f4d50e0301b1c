"""The registry's Cast in the reference lowering: an elementwise expression that rounds where PyTorch's `.to` rounds
(bfloat16 ties to even, float16), fused into the kernels around it, each kernel storing in its output's own dtype;
Cast through the program's JSON, the problem renderer and the parser back. In the Triton interpreter, bit for bit
against the problem's PyTorch (every stored value here is exact in its dtype: the interpreter's own stores to
bfloat16 truncate)."""

import types

import pytest
import torch

from drtriton_ray.ir import Node, Program, Tensor, problem_source
from drtriton_ray.lower.emit import lower_program, lower_source
from drtriton_ray.lower.grouping import kernel_groups
from drtriton_ray.lower.parse import program_from_source
from drtriton_ray.verify.static import check_candidate

SHAPE = [4, 8, 33]


def chain(narrow: str) -> Program:
    """float32 x * y, cast to `narrow` and back, + y: float32 values a bfloat16 or float16 step rounds; a second output
    the narrow cast of x * y itself, stored in its own dtype."""
    tensors = {t: Tensor(t, SHAPE, "float32", "input") for t in (0, 1)}
    tensors |= {2: Tensor(2, SHAPE, "float32", "intermediate"), 3: Tensor(3, SHAPE, narrow, "intermediate")}
    tensors |= {4: Tensor(4, SHAPE, "float32", "intermediate"), 5: Tensor(5, SHAPE, "float32", "output")}
    nodes = [
        Node("Mul", [0, 1], [2]),
        Node("Cast", [2], [3], {"dtype": narrow}),
        Node("Cast", [3], [4], {"dtype": "float32"}),
        Node("Add", [4, 1], [5]),
    ]
    return Program(nodes, tensors, "float32", 0)


def with_narrow_output(p: Program, narrow: str) -> Program:
    p.tensors[6] = Tensor(6, SHAPE, narrow, "output")
    p.nodes.append(Node("Cast", [2], [6], {"dtype": narrow}))
    return p


def run_both(source: str, code: str) -> tuple[list, list, list]:
    """(inputs, the problem's outputs, the candidate's) under one seed."""
    problem, candidate = types.ModuleType("problem"), types.ModuleType("candidate")
    exec(compile(source, "<problem>", "exec"), vars(problem))
    exec(compile(code, "<candidate>", "exec"), vars(candidate))
    torch.manual_seed(3)
    inputs = [3.0 * x for x in problem.get_inputs()]  # products past 1: bfloat16 steps of 2^-6 and more
    want, got = problem.Model()(*inputs), candidate.ModelNew()(*inputs)
    return inputs, *([*out] if isinstance(out, tuple) else [out] for out in (want, got))


@pytest.mark.parametrize("narrow", ["bfloat16", "float16"])
def test_a_cast_in_an_elementwise_chain_rounds_as_pytorch(narrow):
    p = chain(narrow)
    source = problem_source(p)
    code = lower_program(p, source, gpu=None)
    assert not check_candidate(code, "strict")
    assert len(kernel_groups(p)) == 1  # Mul, both casts and Add: one kernel
    (x, y), want, got = run_both(source, code)
    assert got[0].dtype == torch.float32 and torch.equal(got[0], want[0])
    assert not torch.equal(want[0], x * y + y)  # the rounding is real: without it values differ


@pytest.mark.parametrize("narrow", ["bfloat16", "float16"])
def test_each_kernel_stores_in_its_outputs_dtype(narrow):
    """x * y read twice: its kernel stores float32, the chain's float32, the narrow output's kernel its dtype."""
    p = with_narrow_output(chain(narrow), narrow)
    source = problem_source(p)
    code = lower_program(p, source, gpu=None)
    assert f"torch.{narrow}, " in code  # the narrow output's wrapper allocates it so
    _, want, got = run_both(source, code)
    assert [g.dtype for g in got] == [w.dtype for w in want] == [torch.float32, getattr(torch, narrow)]
    for g, w in zip(got, want):
        assert torch.equal(g, w)


def test_a_cast_goes_through_json_the_renderer_and_the_parser():
    p = with_narrow_output(chain("bfloat16"), "bfloat16")
    assert Program.from_json(p.to_json()).to_json() == p.to_json()
    source = problem_source(p)
    assert "tensor_3 = tensor_2.to(torch.bfloat16)" in source and "tensor_4 = tensor_3.to(torch.float32)" in source
    parsed = program_from_source(source)
    assert [(n.op, n.params) for n in parsed.nodes] == [(n.op, n.params) for n in p.nodes]
    assert {t: v.dtype for t, v in parsed.tensors.items()} == {t: v.dtype for t, v in p.tensors.items()}
    assert lower_source(source) == lower_program(p, source)


def test_a_reduction_between_casts_is_one_kernel():
    """A half-precision program's sum in float32 (x.float().sum(-1).to(bfloat16)): the widening is the sum's prologue,
    the narrowing its epilogue; the values match PyTorch's."""
    tensors = {0: Tensor(0, SHAPE, "bfloat16", "input"), 1: Tensor(1, SHAPE, "float32", "intermediate")}
    tensors |= {2: Tensor(2, SHAPE[:2], "float32", "intermediate"), 3: Tensor(3, SHAPE[:2], "bfloat16", "output")}
    nodes = [
        Node("Cast", [0], [1], {"dtype": "float32"}),
        Node("Sum", [1], [2], {"dim": -1, "keepdim": False}),
        Node("Cast", [2], [3], {"dtype": "bfloat16"}),
    ]
    p = Program(nodes, tensors, "bfloat16", 0)
    assert [(g.prologue, g.anchor, g.epilogue) for g in kernel_groups(p)] == [([0], 1, [2])]
    source = problem_source(p)
    code = lower_program(p, source, gpu=None)
    assert not check_candidate(code, "strict")
    _, want, got = run_both(source, code)
    assert got[0].dtype == torch.bfloat16
    torch.testing.assert_close(got[0], want[0], rtol=2**-7, atol=0)  # the interpreter's store truncates


def test_a_kernel_stores_the_dtype_its_group_ends_in():
    """x.float().softmax(-1) of a bfloat16 x: the widening is the softmax's prologue, and the softmax's setup, which
    would allocate its output like x, is given an empty float32 tensor: it stores float32, PyTorch's values."""
    tensors = {0: Tensor(0, SHAPE, "bfloat16", "input"), 1: Tensor(1, SHAPE, "float32", "intermediate")}
    tensors[2] = Tensor(2, SHAPE, "float32", "output")
    nodes = [Node("Cast", [0], [1], {"dtype": "float32"}), Node("Softmax", [1], [2], {"dim": -1})]
    p = Program(nodes, tensors, "bfloat16", 0)
    assert [(g.prologue, g.anchor, g.epilogue) for g in kernel_groups(p)] == [([0], 1, [])]
    source = problem_source(p)
    code = lower_program(p, source, gpu=None)
    assert "like = torch.empty(0, device=x0.device, dtype=torch.float32)" in code
    assert not check_candidate(code, "strict")
    _, want, got = run_both(source, code)
    assert got[0].dtype == torch.float32
    torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-7)
