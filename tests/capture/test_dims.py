"""Which dims vary with the problem's size constants (capture/dims.py): real captures at two sizes, in process (our
own programs only)."""

import pytest

from drtriton_ray.capture.dims import Variation, expression
from drtriton_ray.capture.errors import CaptureError
from drtriton_ray.capture.export import capture_source

HEAD = (
    "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n"
    "batch_size = 2\nseq_len = 6\nhidden = 8\n\n"
)
TAIL = "\n\ndef get_init_inputs():\n    return []\n"


def problem(forward: str, init: str = "pass", inputs: str = "[torch.randn(batch_size, seq_len, hidden)]") -> str:
    body = "\n".join("        " + line for line in forward.splitlines())
    return (
        HEAD
        + f"class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n        {init}\n\n"
        + f"    def forward(self, x):\n{body}\n\n\ndef get_inputs():\n    return {inputs}\n"
        + TAIL
    )


def sym(graph) -> dict:
    return {t.id: t.sym for t in graph.program.tensors.values() if t.sym}


def test_leading_dims_vary_and_the_feature_dim_is_not_inferred():
    g = capture_source(problem("return F.rms_norm(x, (hidden,)) * 2.0"), dynamic=None)
    assert g.dims == {"batch_size": 2, "seq_len": 6}
    assert g.program.tensors[g.inputs[0]].sym == ["batch_size", "seq_len", ""]
    assert all(s[:2] == ["batch_size", "seq_len"] for s in sym(g).values())


def test_sizes_in_operator_arguments_are_symbolic_too():
    """A reshape to (batch_size * seq_len, hidden), a slice to seq_len - 1 positions and an arange(seq_len) carry
    sizes in their arguments: Node.sym names them, the fragment's problem writes them out, the JSON keeps them."""
    from drtriton_ray.ir import Graph, problem_source

    g = capture_source(problem("return x.reshape(-1, hidden) * 2.0"), dynamic=["batch_size", "seq_len"])
    assert g.dims == {"batch_size": 2, "seq_len": 6}, g.notes
    view = g.program.nodes[0]
    assert view.op == "View" and view.sym == {"shape.0": "batch_size*seq_len"}
    assert "reshape([(batch_size*seq_len), 8])" in problem_source(g.program, sizes=g.dims)
    assert Graph.from_json(g.to_json()).program.nodes[0].sym == view.sym
    h = capture_source(problem("return x[:, 1:] + 1.0, x * 2.0"), dynamic=["batch_size", "seq_len"])
    assert h.dims == {"batch_size": 2, "seq_len": 6}, h.notes
    assert {n.op: n.sym for n in h.program.nodes}["Narrow"] == {"length": "seq_len-1"}
    arange = problem("return x + torch.arange(x.shape[1], dtype=x.dtype)[:, None]")
    a = capture_source(arange, dynamic=["seq_len"])
    assert a.dims == {"seq_len": 6} and a.program.nodes[0].sym == {"args.0": "seq_len"}, a.notes


def test_a_constant_that_sets_other_arguments_cannot_vary():
    """An argument that changes with a size but is not an integer (a scale of 1 / seq_len) stays specialized."""
    g = capture_source(problem("return x * (1.0 / x.shape[1])"), dynamic=["seq_len"])
    assert g.dims == {} and "seq_len sets operator arguments (node 0: MulScalar)" in " ".join(g.notes)


def test_a_constant_that_sizes_a_parameter_or_the_graph_cannot_vary():
    g = capture_source(
        problem("return x * self.w", init="self.w = nn.Parameter(torch.ones(seq_len, hidden))"), dynamic=["seq_len"]
    )
    assert g.dims == {} and "sizes a parameter or buffer (w)" in " ".join(g.notes)
    branchy = problem("if x.shape[0] > 2:\n    return x * 2.0\nreturn x + 1.0")
    g = capture_source(branchy, dynamic=["batch_size"])
    assert g.dims == {} and "the graph changes with batch_size" in " ".join(g.notes)


def test_an_unknown_dynamic_name_is_one_clear_error():
    with pytest.raises(CaptureError, match="--dynamic batch: the problem has no module-level size constant batch"):
        capture_source(problem("return x * 2.0"), dynamic=["batch"])


def test_no_dims_unless_asked_and_the_json_keeps_them():
    from drtriton_ray.ir import Graph

    source = problem("return x * 2.0")
    assert capture_source(source).dims == {} and not sym(capture_source(source))
    g = capture_source(source, dynamic=["seq_len"])
    again = Graph.from_json(g.to_json())
    assert again.dims == {"seq_len": 6} and sym(again) == sym(g)


def test_expressions_fit_every_variation_or_none():
    b, s = Variation("b", 3), Variation("s", 7)
    assert expression(12, [(b, 18), (s, 14)], {"b": 2, "s": 6}) == "b*s"
    assert expression(24, [(b, 18), (s, 14)], {"b": 2, "s": 6}) is None  # 2*b*s would give 36 and 28
    assert expression(5, [(Variation("s", 7), 6)], {"s": 6}) == "s-1"
    assert expression(5, [(Variation("s", 8), 6)], {"s": 6}) is None  # half a step: no integer slope
