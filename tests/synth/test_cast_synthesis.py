"""Cast in synthesis: drawn as a widening (float32 in a half-precision program, float64 in a float32 one) whose
readers compute in the wider dtype, and the narrowing back, drawn or a guard, so that every output has the program's
dtype; such programs lower and match PyTorch in the Triton interpreter."""

import types

import pytest
import torch

from drtriton_ray.ir import Program
from drtriton_ray.lower.emit import lower_program
from drtriton_ray.synth import Sampler, SynthConfig
from drtriton_ray.synth.solve import WIDER


def check_dtypes(p: Program) -> None:
    """A Cast changes the dtype; every other operator reads and makes floats of one dtype (its weights too); every
    float output has the program's dtype."""
    for n in p.nodes:
        floats = {p.tensors[t].dtype for t in n.inputs + n.weights + n.outputs} - {"bool", "int64"}
        if n.op == "Cast":
            (source,), (target,) = ({p.tensors[t].dtype for t in ts} for ts in (n.inputs, n.outputs))
            assert target == n.params["dtype"] and source != target and {source, target} == {p.dtype, WIDER[p.dtype]}
        else:
            assert len(floats) <= 1, (n.op, floats)
    assert {p.tensors[t].dtype for t in p.outputs} - {"bool", "int64"} <= {p.dtype}


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_a_cast_alone_widens_and_narrows_back(dtype):
    rec = Sampler(SynthConfig(level=1, profile="small", dtype=dtype, ops=("Cast",)), seed=1).sample(0)
    p = Program.from_json(rec.dag)
    assert [(n.op, n.params) for n in p.nodes] == [("Cast", {"dtype": WIDER[dtype]}), ("Cast", {"dtype": dtype})]
    check_dtypes(p)


def test_operators_after_a_widening_compute_wide():
    """Level 2 pairs (Cast, X) compute X in float32 in a bfloat16 program (a guard narrows its result back), and at
    level 5 Casts mixed with other operators keep every operator's floats of one dtype."""
    ops = ("Cast", "Sum", "Softmax", "LayerNorm", "Add", "Linear")
    sampler = Sampler(SynthConfig(level=2, profile="small", dtype="bfloat16", ops=ops), seed=2)
    wide = set()
    for i in range(len(ops) ** 2):
        rec = sampler.sample(i)
        p = Program.from_json(rec.dag)
        check_dtypes(p)
        if rec.ops[0] == "Cast" and rec.ops[1] != "Cast":
            node = next(n for n in p.nodes if n.op == rec.ops[1])
            assert p.tensors[node.outputs[0]].dtype == "float32"
            wide.add(rec.ops[1])
    assert wide == set(ops) - {"Cast"}
    sampler = Sampler(SynthConfig(level=5, profile="small", dtype="float16", ops=ops, fanout_prob=0.5), seed=3)
    for i in range(6):
        check_dtypes(Program.from_json(sampler.sample(i).dag))


def run(rec, code: str) -> tuple[list, list]:
    problem, candidate = types.ModuleType("problem"), types.ModuleType("candidate")
    exec(compile(rec.source, "<problem>", "exec"), vars(problem))
    exec(compile(code, "<candidate>", "exec"), vars(candidate))
    torch.manual_seed(rec.seed)
    model = problem.Model()
    torch.manual_seed(rec.seed)
    new = candidate.ModelNew()
    inputs = problem.get_inputs()
    with torch.no_grad():
        want, got = model(*inputs), new(*inputs)
    return [want] if isinstance(want, torch.Tensor) else list(want), [got] if isinstance(got, torch.Tensor) else list(
        got
    )


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_cast_programs_lower_and_match_pytorch(dtype):
    """The widened operators computed by the kernels (in float32, the wider dtype's values rounded where the casts
    round), against PyTorch's, in the program's tolerance."""
    ops = ("Cast", "Softmax", "Sum", "GELU")
    sampler = Sampler(SynthConfig(level=2, profile="small", dtype=dtype, ops=ops), seed=4)
    tol = 2e-2 if dtype == "bfloat16" else 1e-3
    pairs = [i for i in range(len(ops) ** 2) if "Cast" in sampler.planned_ops(i)]
    assert len(pairs) == 2 * len(ops) - 1  # (Cast, X), (X, Cast): every one
    for i in pairs:
        rec = sampler.sample(i)
        want, got = run(rec, lower_program(Program.from_json(rec.dag), rec.source, gpu=None))
        for w, g in zip(want, got):
            assert g.dtype == w.dtype == getattr(torch, dtype)
            torch.testing.assert_close(g, w, rtol=tol, atol=tol)
