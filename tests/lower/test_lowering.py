"""The reference lowering against PyTorch, in the Triton interpreter: every operator, and whole
level-2 and level-5 programs (fused elementwise groups, fan-out, several outputs)."""
import importlib.util

import pytest
import torch

from drtriton_ray.lower.emit import fusion_groups, lower_program
from drtriton_ray.ops import REGISTRY
from drtriton_ray.synth import Program, Sampler, SynthConfig
from drtriton_ray.synth.validate import load_problem


def _import(source: str, path):
    """Import the candidate from a file, as the verifier does (Triton reads kernel source)."""
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def check_lowering(rec, tmp_path, input_seed: int = 1234):
    prog = Program.from_json(rec.dag)
    cand = _import(lower_program(prog, rec.source), tmp_path / f"cand_{rec.id.replace('-', '_')}.py")
    ref = load_problem(rec.source)
    torch.manual_seed(rec.seed)
    model = ref.Model()
    torch.manual_seed(rec.seed)
    new = cand.ModelNew()
    torch.manual_seed(input_seed)
    inputs = ref.get_inputs()
    with torch.no_grad():
        want, got = model(*inputs), new(*inputs)
    want = want if isinstance(want, tuple) else (want,)
    got = got if isinstance(got, tuple) else (got,)
    assert len(want) == len(got)
    for w, g in zip(want, got):
        assert type(g) is torch.Tensor and g.shape == w.shape and g.dtype == w.dtype
        if w.dtype == torch.int64:
            assert torch.equal(w, g)
        else:
            tol = 1e-3 if w.dtype == torch.float32 else 2e-2
            torch.testing.assert_close(g, w, atol=tol, rtol=tol)


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_operator_lowers(name, tmp_path):
    check_lowering(Sampler(SynthConfig(level=1, profile="small", ops=(name,)), seed=31).sample(0), tmp_path)


def test_level2_programs(tmp_path):
    sampler = Sampler(SynthConfig(level=2, profile="small"), seed=32)
    for i in range(12):
        check_lowering(sampler.sample(i), tmp_path)


def test_level5_programs_fuse_elementwise(tmp_path):
    elementwise = ("Add", "Mul", "ReLU", "GELU", "Sigmoid", "Where", "Lerp", "Sum", "Softmax", "Matmul")
    sampler = Sampler(SynthConfig(level=5, profile="small", ops=elementwise), seed=33)
    fused = 0
    for i in range(8):
        rec = sampler.sample(i)
        fused += any(len(g) > 1 for g in fusion_groups(Program.from_json(rec.dag)))
        check_lowering(rec, tmp_path)
    assert fused >= 2, "elementwise chains should fuse into one kernel"


def test_half_precision(tmp_path):
    sampler = Sampler(SynthConfig(level=2, profile="small", dtype="float16",
                                  ops=("Add", "ReLU", "Softmax", "Sum", "LayerNorm")), seed=34)
    for i in range(4):
        check_lowering(sampler.sample(i), tmp_path)


def test_lowering_from_source_alone(tmp_path):
    """`drtriton lower PROBLEM.py`: the DAG is recovered from the problem text and one run."""
    from drtriton_ray.lower.emit import lower_source
    from drtriton_ray.lower.parse import UnsupportedProblem, program_from_source
    sampler = Sampler(SynthConfig(level=5, profile="small"), seed=35)
    for i in range(6):
        rec = sampler.sample(i)
        parsed, original = program_from_source(rec.source), Program.from_json(rec.dag)
        assert [(n.op, n.inputs, n.outputs, n.weights) for n in parsed.nodes] == \
            [(n.op, n.inputs, n.outputs, n.weights) for n in original.nodes]
        assert {k: (t.shape, t.role) for k, t in parsed.tensors.items()} == \
            {k: (t.shape, t.role) for k, t in original.tensors.items()}
        assert lower_source(rec.source) == lower_program(original, rec.source)
    with pytest.raises(UnsupportedProblem, match="no operator of the registry"):
        program_from_source(rec.source.replace("return tensor_", "tensor_99 = torch.fft.fft(tensor_0)\n        return tensor_", 1))
    with pytest.raises(UnsupportedProblem, match="does not load"):
        program_from_source("def broken(:\n")


def test_lower_cli(tmp_path):
    from typer.testing import CliRunner

    from drtriton_ray.cli import app
    runner = CliRunner()
    rec = Sampler(SynthConfig(level=2, profile="small"), seed=36).sample(0)
    problem = tmp_path / "problem.py"
    problem.write_text(rec.source)
    r = runner.invoke(app, ["lower", str(problem), "--out", str(tmp_path / "solution.py")])
    assert r.exit_code == 0, r.output
    assert "class ModelNew(nn.Module)" in (tmp_path / "solution.py").read_text()
    bad = {"empty.py": b"", "latin1.py": "x = 'caf\xe9'".encode("latin-1"), "nomodel.py": b"x = 1\n",
           "syntax.py": b"class Model(:\n"}
    for name, content in bad.items():
        (tmp_path / name).write_bytes(content)
        r = runner.invoke(app, ["lower", str(tmp_path / name)])
        assert r.exit_code == 2 and "error:" in r.output and "Traceback" not in r.output, (name, r.output)
    r = runner.invoke(app, ["lower", str(tmp_path / "missing.py")])
    assert r.exit_code == 2 and "cannot read" in r.output
