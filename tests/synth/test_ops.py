"""Every operator: its CP-SAT constraints have solutions, and a solved instance renders to a
problem that imports, builds and runs in PyTorch with the shapes the DAG promises."""

import json

import pytest
import torch

from drtriton_ray.ops import DRTRITON_OPS, REGISTRY, SYNTH_NAMES
from drtriton_ray.ir import Program
from drtriton_ray.synth import Sampler, SynthConfig
from drtriton_ray.ir import load_problem
from drtriton_ray.synth.validate import build_model, run_problem
from drtriton_ray.verify.inputs import STRESS_SCALES, make_inputs
from drtriton_ray.verify.task import DISTRIBUTIONS

GUARDS = {"Abs", "AddScalar", "Clamp", "Cast"}  # what synth/wiring.py puts before a restricted input slot, or a Cast
RESTRICTED = sorted(n for n, s in REGISTRY.items() if set(s.domains) - {"real"})

DRTRITON_NAMES = """Add Sub Mul Div Maximum Minimum Matmul Bmm Conv1d Conv2d Conv3d ConvTranspose1d
ConvTranspose2d ConvTranspose3d Cat Stack Lerp Sum Mean Max Min ArgMax ArgMin Var Norm Transpose ReLU
LeakyReLU Sigmoid Tanh Softmax LogSoftmax Swish GELU SELU Hardsigmoid Softplus Softsign ELU HardTanh
Clamp BatchNorm LayerNorm GroupNorm InstanceNorm AvgPool1d AvgPool2d AvgPool3d MaxPool1d MaxPool2d
MaxPool3d Cos Sin Exp2 LogSigmoid Abs CumMax CumMin CumSum Triu Tril""".split()


def test_registry_has_drtriton_61_and_synthesis_draws_all():
    assert len(DRTRITON_NAMES) == 61
    assert {op.name for op in DRTRITON_OPS} == set(DRTRITON_NAMES)
    assert set(DRTRITON_NAMES) < set(REGISTRY)
    assert SYNTH_NAMES == list(REGISTRY)  # synthesis draws every operator
    for spec in REGISTRY.values():
        assert spec.arity >= 1 and spec.dtypes and "float32" in spec.dtypes


@pytest.mark.parametrize("name", sorted(SYNTH_NAMES))
def test_operator_instances_run(name):
    sampler = Sampler(SynthConfig(level=1, profile="small", ops=(name,)), seed=11)
    for index in range(3):  # three solved instances, each validated and re-run here
        rec = sampler.sample(index)
        prog, spec = Program.from_json(rec.dag), REGISTRY[name]
        assert rec.ops == [name] and prog.ops[-1] == name and set(prog.ops[:-1]) <= GUARDS
        # a Cast widens: the Cast guard after it narrows back (synth/wiring.py)
        assert (len(prog.ops) > 1) == (bool({"positive", "bounded"} & set(spec.domains)) or name == "Cast")
        outs = run_problem(load_problem(rec.source), rec.seed)
        assert [list(o.shape) for o in outs] == [prog.tensors[t].shape for t in prog.outputs]
        assert all(torch.isfinite(o).all() for o in outs if o.is_floating_point())
        node = prog.nodes[-1]
        for tid in node.inputs + node.outputs + node.weights:
            t = prog.tensors[tid]
            assert 2**3 <= t.numel <= 2**16 and max(t.shape, default=1) <= 1024 or t.shape == [] and spec.scalar_out


@pytest.mark.parametrize("name", RESTRICTED)
def test_restricted_domains_hold_on_verifier_inputs(name):
    """An operator with a positive, bounded or mask input slot gets programs whose outputs stay finite on every
    input distribution of the verifier, its stress distributions at their largest scale included: the program keeps
    the slot in its domain, not the inputs the problem draws."""
    rec = Sampler(SynthConfig(level=1, profile="small", ops=(name,)), seed=3).sample(0)
    prog = Program.from_json(rec.dag)
    spec, node = REGISTRY[name], prog.nodes[-1]
    for slot, t in enumerate(node.inputs):
        assert (prog.tensors[t].dtype == "bool") == (spec.domain(slot) == "mask")
    mod = load_problem(rec.source)
    model = build_model(mod, rec.seed)
    for dist in DISTRIBUTIONS:
        inputs = make_inputs(mod.get_inputs, dist, 5, "cpu", STRESS_SCALES[0])
        with torch.no_grad():
            out = model(*inputs)
        assert torch.isfinite(out).all(), f"{name} on {dist} inputs"


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_dtypes(dtype):
    names = [n for n in SYNTH_NAMES if dtype in REGISTRY[n].dtypes]
    assert len(names) >= 60
    for i, name in enumerate(names):
        rec = Sampler(SynthConfig(level=1, profile="small", dtype=dtype, ops=(name,)), seed=5).sample(i)
        assert f"torch.{dtype}" in rec.source and rec.dtype == dtype
        for t in json.loads(rec.dag)["tensors"]:  # a Cast's widened tensor in float32, then narrowed back
            assert t["dtype"] in (dtype, "int64", "bool") or name == "Cast" and t["dtype"] == "float32"


def test_ops_without_half_support_are_refused():
    with pytest.raises(ValueError, match="do not support dtype"):
        SynthConfig(level=1, dtype="float16", ops=("AvgPool3d",))


def test_cross_entropy_targets_are_class_indices():
    """CrossEntropy's target slot is a fresh int64 input of class indices into the logits' last dim, its
    ignore_index among them; its output is per row or a 0-d mean or sum, each drawn."""
    sampler = Sampler(SynthConfig(level=1, profile="small", ops=("CrossEntropy",)), seed=11)
    seen, ignored = set(), 0
    for index in range(12):
        rec = sampler.sample(index)
        prog = Program.from_json(rec.dag)
        node = prog.nodes[-1]
        logits, target = (prog.tensors[t] for t in node.inputs)
        ignore, reduction = node.params["ignore_index"], node.params["reduction"]
        classes = logits.shape[1]
        assert target.dtype == "int64" and target.role == "input" and target.init == f"int:0:{classes}:{ignore}"
        torch.manual_seed(index)
        drawn = load_problem(rec.source).get_inputs()[1]
        kept = drawn[drawn != ignore]
        assert drawn.dtype == torch.int64 and bool((kept >= 0).all()) and bool((kept < classes).all())
        ignored += drawn.numel() - kept.numel()
        assert prog.tensors[node.outputs[0]].shape == (logits.shape[:1] if reduction == "none" else [])
        seen.add((reduction, ignore))
    assert {r for r, _ in seen} == {"none", "mean", "sum"} and {i for _, i in seen} == {-100, -1} and ignored
