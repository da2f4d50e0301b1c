"""The program form: one serialisation that round-trips (symbolic dims too), one renderer whose sources run."""

import json

import torch

from drtriton_ray.ir import TORCH_OP, Graph, Node, Problem, Program, Tensor, graph_source, load_problem
from drtriton_ray.ir.render import functional_source, problem_source


def rmsnorm_like(sym: bool = False) -> Program:
    """x * rsqrt(mean(x^2)) * w: a Torch node beside registry nodes, a batch/seq dim when `sym`."""
    names = ["batch", "seq", ""] if sym else []
    tensors = {
        0: Tensor(0, [2, 3, 8], "float32", "input", sym=list(names)),
        1: Tensor(1, [8], "float32", "weight", "one"),
        2: Tensor(2, [2, 3, 1], "float32", "intermediate", sym=names[:2] + [""] if sym else []),
        3: Tensor(3, [2, 3, 8], "float32", "intermediate", sym=list(names)),
        4: Tensor(4, [2, 3, 8], "float32", "output", sym=list(names)),
    }
    mean_sq = {"target": "aten.mean.dim", "args": [{"$t": 0}, [-1], True], "kwargs": {}}
    nodes = [
        Node(TORCH_OP, [0], [2], mean_sq),
        Node("Div", [0, 2], [3]),
        Node("Mul", [3, 1], [4]),
    ]
    return Program(nodes, tensors, "float32", 0)


def test_program_round_trips_through_json():
    p = rmsnorm_like(sym=True)
    q = Program.from_json(p.to_json())
    assert q == p
    assert q.dims() == {"batch": 2, "seq": 3}


def test_fixed_dims_serialize_as_before_symbolic_dims_existed():
    """Programs without symbolic dims keep their stored form (datasets, cache keys): no `sym` field at all."""
    d = json.loads(rmsnorm_like().to_json())
    assert all("sym" not in t for t in d["tensors"])
    assert "sym" in json.loads(rmsnorm_like(sym=True).to_json())["tensors"][0]


def test_graph_round_trips_and_keeps_its_bindings():
    p = rmsnorm_like()
    g = Graph(p, [0], state={1: "norm.weight"}, lines={1: "line 3: x / ms"}, notes=["mean kept in PyTorch"])
    h = Graph.from_json(g.to_json())
    assert h == g and h.weights == [1] and h.results == [4]
    assert "outputs" not in g.to_dict()  # a Graph's dict carries the roles, not a second list of outputs


def test_problem_source_runs_and_computes_the_program():
    p = rmsnorm_like()
    mod = load_problem(problem_source(p))
    torch.manual_seed(0)
    model = mod.Model(*mod.get_init_inputs())
    (x,) = mod.get_inputs()
    out = model(x)
    expected = x / torch.mean(x, dim=-1, keepdim=True) * model.weight_1
    torch.testing.assert_close(out, expected)


def test_functional_and_graph_sources_agree_with_the_problem():
    p = rmsnorm_like()
    x, w = torch.randn(2, 3, 8), torch.rand(8) + 0.5
    fused = load_problem(functional_source(p)).fused_operator(x, w)[0]
    graph = load_problem(graph_source(Graph(p, [0], state={1: "w"}))).graph_forward(x, w)[0]
    torch.testing.assert_close(fused, graph)


def test_problem_value_round_trips():
    problem = Problem.of(rmsnorm_like(), name="rms")
    again = Problem.from_dict(json.loads(json.dumps(problem.to_dict())))
    assert again == problem and "class Model" in again.source
    assert Problem.from_dict(Problem("x = 1").to_dict()).program is None


def test_ir_imports_no_stage():
    """The program form is the floor every stage stands on: importing it loads no stage package."""
    import subprocess
    import sys

    code = "import json, sys, drtriton_ray.ir; print(json.dumps(sorted(sys.modules)))"
    loaded = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert sorted({m.split(".")[1] for m in loaded if m.startswith("drtriton_ray.")}) == ["ir", "ops"]


def test_a_problem_with_symbolic_dims_draws_its_inputs_at_the_sizes_set():
    """The verifier checks other shapes by setting the size constants before get_inputs(): the drawn shapes follow
    them, while the problem's module-level shape constants keep the sample sizes."""
    p = rmsnorm_like(sym=True)
    source = problem_source(p)
    assert "batch = 2\nseq = 3\n" in source and "TENSOR_0_SHAPE = (batch, seq, 8)" in source
    mod = load_problem(source)
    model = mod.Model()
    mod.batch, mod.seq = 5, 7
    (x,) = mod.get_inputs()
    assert x.shape == (5, 7, 8) and model(x).shape == (5, 7, 8)
    assert "batch = 4\n" in problem_source(p, sizes={"batch": 4})
