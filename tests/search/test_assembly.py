"""Assembly: the tiling's dynamic programming on given times, the scope-aware prefixing of a candidate, and an
assembled module run against the program it replaces."""

import ast
import copy

import pytest
import torch
from search_graphs import MLP_BLOCK_SOURCE, mlp_block

from drtriton_ray.ir import TORCH_OP
from drtriton_ray.lower.emit import NotLowerable, lower_program
from drtriton_ray.search.assembly import (
    AssemblyError,
    Option,
    candidate_parts,
    choose_tiling,
    moved_bytes,
    node_times,
    render_module,
    state_expr,
)
from drtriton_ray.search.fragments import enumerate_fragments
from drtriton_ray.ir import Node, Tensor


def kinds(pieces):
    return [(p.start, p.end, p.kind) for p in pieces]


def test_timed_tiling_takes_the_least_total_time():
    node_ms = [1.0, 1.0, 1.0, 1.0]
    options = [
        Option(0, 2, 1.5, "a"),  # saves 0.5
        Option(1, 3, 0.5, "b"),  # saves 1.5
        Option(2, 4, 1.0, "c"),  # saves 1.0
        Option(3, 4, 2.0, "slow"),  # slower than PyTorch: never chosen
    ]
    pieces = choose_tiling(4, options, node_ms)
    assert kinds(pieces) == [(0, 1, "torch"), (1, 3, "triton"), (3, 4, "torch")]
    assert sum(p.ms for p in pieces) == pytest.approx(2.5)
    # equal time: PyTorch (no fragment) wins the tie
    assert kinds(choose_tiling(2, [Option(0, 2, 2.0, "x")], [1.0, 1.0])) == [(0, 1, "torch"), (1, 2, "torch")]
    # an untimed option cannot be weighed on a GPU
    assert all(p.kind == "torch" for p in choose_tiling(2, [Option(0, 2, None, "x")], [1.0, 1.0]))


def test_untimed_tiling_covers_most_nodes_with_fewest_fragments():
    options = [Option(0, 1, None, "a"), Option(1, 2, None, "b"), Option(0, 2, None, "ab"), Option(3, 4, None, "d")]
    pieces = choose_tiling(4, options, None)
    assert kinds(pieces) == [(0, 2, "triton"), (2, 3, "torch"), (3, 4, "triton")]
    assert [p.fragment for p in pieces if p.kind == "triton"] == ["ab", "d"]
    assert kinds(choose_tiling(2, [], None)) == [(0, 1, "torch"), (1, 2, "torch")]


def test_node_times_from_one_node_fragments_then_shares():
    ms = node_times(3, [(0, 1, 2.0), (0, 3, 5.0), (1, 2, 1.0)])
    assert ms == [2.0, 1.0, 2.0]  # node 2: what the 3-node fragment leaves over
    assert node_times(2, []) == [0.0, 0.0]


def test_node_times_share_by_bytes_and_never_leave_a_node_free():
    """A scale of a large tensor, then two views, then a masked softmax measured alone: the 3-node fragment's time
    left over goes by bytes (the views get none); a node in no measured fragment costs its bytes at the fastest
    measured rate, so the tiling does not hand it to PyTorch for nothing."""
    moved = [8, 0, 0, 8]
    assert node_times(4, [(0, 3, 4.0), (3, 4, 2.0)], moved) == [4.0, 0.0, 0.0, 2.0]
    ms = node_times(4, [(3, 4, 2.0)], moved)  # only the softmax measured: 2 ms for 8 bytes
    assert ms == [2.0, 0.0, 0.0, 2.0]
    # with the scale priced, the one fragment over all four beats PyTorch's scale + the softmax's fragment
    options = [Option(0, 4, 2.1, "whole"), Option(3, 4, 2.0, "softmax")]
    assert kinds(choose_tiling(4, options, ms)) == [(0, 4, "triton")]


def test_moved_bytes_of_a_program():
    from drtriton_ray.ir import Program

    tensors = {0: Tensor(0, [4, 8], "bfloat16", "input"), 1: Tensor(1, [32], "bfloat16", "intermediate")}
    tensors[2] = Tensor(2, [32], "float32", "output")
    nodes = [Node("View", [0], [1], {"shape": [32]}), Node("Cast", [1], [2], {"dtype": "float32"})]
    p = Program(nodes, tensors, "bfloat16", 0)
    assert moved_bytes(p) == [0, 32 * 2 + 32 * 4]


CANDIDATE = """
import torch
import triton
import triton.language as tl

BLOCK = 128


@triton.jit
def kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


def helper(x, kernel=None):
    return kernel


def launch(x):
    out = torch.empty_like(x)
    kernel[(triton.cdiv(x.numel(), BLOCK),)](x, out, x.numel(), BLOCK=BLOCK)
    return out


class ModelNew(torch.nn.Module):
    def forward(self, tensor_0):
        helper = launch(tensor_0 * self.weight_3)
        return helper
"""


def test_candidate_names_are_prefixed_where_they_are_meant():
    parts = candidate_parts(CANDIDATE, "drt0_", [3])
    tree = ast.parse(parts.definitions + "\n" + parts.function)
    defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    assert defined == {"drt0_kernel", "drt0_helper", "drt0_launch", "drt0_forward"}
    assert "drt0_BLOCK = 128" in parts.definitions
    assert "drt0_kernel[triton.cdiv(x.numel(), drt0_BLOCK),](x, out, x.numel(), BLOCK=drt0_BLOCK)" in (
        parts.definitions
    )
    # a parameter named like a global shadows it; keyword names are not names
    assert "def drt0_helper(x, kernel=None):\n    return kernel" in parts.definitions
    assert "BLOCK: tl.constexpr" in parts.definitions  # the kernel's own parameter
    # forward: a function; self.weight_3 an argument; a local named like a global stays local
    assert parts.function.startswith("def drt0_forward(tensor_0, weight_3):")
    assert "helper = drt0_launch(tensor_0 * weight_3)" in parts.function
    assert parts.instance_class == "" and "ModelNew" not in parts.definitions
    assert parts.imports == ["import torch", "import triton", "import triton.language as tl"]


def test_a_forward_reading_other_attributes_keeps_an_instance():
    code = CANDIDATE.replace("self.weight_3)", "self.weight_3 * self.scale)")
    parts = candidate_parts(code, "drt1_", [3])
    assert parts.instance_class == "drt1_ModelNew"
    assert parts.function.startswith("def drt1_forward(self, tensor_0, weight_3):")
    with pytest.raises(AssemblyError):
        candidate_parts("import torch\n", "drt0_", [])


def test_state_names_become_attribute_paths():
    assert state_expr("fc.weight") == "self.fc.weight"
    assert state_expr("layers.0.norm.bias") == "self.layers[0].norm.bias"


def lowered(graph):
    options, chosen = [], {}
    for f in enumerate_fragments(graph):
        try:
            code = lower_program(f.program, f.source)
        except NotLowerable:
            continue
        options.append(Option(f.start, f.end, None, f.hash))
        chosen[(f.start, f.end)] = (f, code)
    return options, chosen


def test_assembled_module_matches_the_program():
    g = mlp_block()
    options, chosen = lowered(g)
    pieces = choose_tiling(len(g.program.nodes), options, None)
    assert kinds(pieces) == [(0, 4, "triton"), (4, 5, "torch")]
    source = render_module(MLP_BLOCK_SOURCE, g, pieces, chosen)
    assert "class Model(" not in source and "get_inputs" not in source
    assert "drt0_forward(x, self.fc.weight, self.fc.bias, self.norm.weight)" in source
    user, mine = {}, {}
    exec(compile(MLP_BLOCK_SOURCE, "<user>", "exec"), user)
    exec(compile(source, "<assembled>", "exec"), mine)
    torch.manual_seed(0)
    ref = user["Model"]()
    torch.manual_seed(0)
    new = mine["ModelNew"]()
    assert list(new.state_dict()) == list(ref.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(new.state_dict().values(), ref.state_dict().values()))
    x = torch.randn(4, 16)
    for a, b in zip(new(x), ref(x)):
        assert torch.allclose(a, b, atol=1e-4, rtol=1e-4)


def test_nodes_left_to_pytorch_render_through_their_templates():
    """Only Linear -> GELU in Triton: Add, RMSNorm (F.rms_norm) and the ATen mul stay PyTorch, in a program
    that never imported F itself."""
    g = mlp_block()
    source = MLP_BLOCK_SOURCE.replace("import torch.nn.functional as F\n", "").replace("F.gelu", "torch.tanh")
    source = source.replace("torch.tanh", "torch.nn.functional.gelu")
    options, chosen = lowered(g)
    pieces = choose_tiling(5, [o for o in options if (o.start, o.end) == (0, 2)], None)
    assert kinds(pieces) == [(0, 2, "triton"), (2, 3, "torch"), (3, 4, "torch"), (4, 5, "torch")]
    module = render_module(source, g, pieces, chosen)
    assert "F.rms_norm(t6, t6.shape[-1:], self.norm.weight)" in module
    user, mine = {}, {}
    exec(compile(source, "<user>", "exec"), user)
    exec(compile(module, "<assembled>", "exec"), mine)
    torch.manual_seed(0)
    ref = user["Model"]()
    torch.manual_seed(0)
    new = mine["ModelNew"]()
    x = torch.randn(4, 16)
    for a, b in zip(new(x), ref(x)):
        assert torch.allclose(a, b, atol=1e-4, rtol=1e-4)


def with_constant(graph, factor: float):
    """mlp_block whose last node multiplies by a constant tensor (id 9) holding `factor`."""
    g = copy.deepcopy(graph)
    g.program.tensors[9] = Tensor(9, [1], "float32", "weight")
    g.program.nodes[4] = Node(TORCH_OP, [7, 9], [8], {"target": "aten.mul.Tensor", "args": [{"$t": 7}, {"$t": 9}]})
    g.program.nodes[4].params["kwargs"] = {}
    g.constants = {9: {"values": [factor], "dtype": "float32"}}
    return g


def test_an_eval_graph_renders_an_eval_branch():
    """A graph that computes differently in eval mode: `if self.training` runs the tiling, else the eval graph
    (here all PyTorch, the default), each with its own constants."""
    g = with_constant(mlp_block(), 2.0)
    g.eval_graph = with_constant(mlp_block(), 3.0)
    options, chosen = lowered(g)
    pieces = choose_tiling(len(g.program.nodes), options, None)
    module = render_module(MLP_BLOCK_SOURCE, g, pieces, chosen)
    assert "if self.training:" in module and "self.drt_eval_const_9" in module and "self.drt_const_9" in module
    mine = {}
    exec(compile(module, "<assembled>", "exec"), mine)
    new = mine["ModelNew"]()
    x = torch.randn(4, 16)
    h, train = new(x)
    new.eval()
    h_eval, evaluated = new(x)
    torch.testing.assert_close(h_eval, h)
    torch.testing.assert_close(evaluated, train * 1.5)


def test_the_preamble_leaves_out_what_names_the_entry_points():
    """Module-level code that names Model, get_inputs or get_init_inputs, or a name such code defines, stays with
    the original (the solution has none of them); the rest is kept verbatim."""
    from drtriton_ray.search.assembly import preamble

    source = """import torch
SIZE = 64


def helper(x):
    return x * SIZE


def warm():
    return _init()


class Model(torch.nn.Module):
    def forward(self, x):
        return helper(x)


def get_inputs():
    return [torch.randn(SIZE)]


def get_init_inputs():
    return []


_init = get_init_inputs
ALIAS = Model
"""
    kept = "\n".join(preamble(source, ast.parse(source)))
    assert "SIZE = 64" in kept and "def helper" in kept and "import torch" in kept
    for gone in ("_init", "def warm", "ALIAS", "class Model", "def get_inputs", "def get_init_inputs"):
        assert gone not in kept, gone


def test_the_guard_frees_the_dims_general_kernels_take_and_keeps_their_relations():
    """Fixed dims and dtypes always checked; with general kernels, symbolic dims take any size as long as the inputs
    agree on the size constants (here the mask's rows follow the scores' sequence); otherwise every size is checked."""
    from drtriton_ray.ir import Graph, Program
    from drtriton_ray.search.assembly import GUARD, guard_lines

    tensors = {
        0: Tensor(0, [2, 8, 64], "float32", "input", sym=["batch", "seq", ""]),
        1: Tensor(1, [8, 4], "float32", "input", sym=["seq", ""]),
        2: Tensor(2, [2, 8, 64], "float32", "output", sym=["batch", "seq", ""]),
    }
    graph = Graph(Program([Node("Relu", [0], [2])], tensors, "float32", 0), [0, 1], dims={"batch": 2, "seq": 8})
    model = ast.parse("class Model:\n    def forward(self, x, m):\n        return x").body[0]

    def accepts(general: bool, x, m) -> bool:
        (test, _) = guard_lines(graph, {0: "x", 1: "m"}, model, general)
        namespace = {"torch": torch}
        exec(GUARD + "\n\ndef ok(x, m):\n    return " + test.removeprefix("if not (").removesuffix("):"), namespace)
        return namespace["ok"](x, m)

    x, m = torch.zeros(2, 8, 64), torch.zeros(8, 4)
    assert accepts(False, x, m) and accepts(True, x, m)
    other = torch.zeros(3, 5, 64), torch.zeros(5, 4)
    assert accepts(True, *other) and not accepts(False, *other)
    assert not accepts(True, torch.zeros(3, 5, 64), torch.zeros(6, 4))  # the mask disagrees on seq
    assert not accepts(True, torch.zeros(3, 5, 32), torch.zeros(5, 4))  # a fixed dim
    assert not accepts(True, torch.zeros(2, 8, 64, dtype=torch.float64), m)  # the dtype


def test_pytorch_nodes_read_their_sizes_from_the_inputs_and_make_tensors_on_the_inputs_device():
    """An arange(seq) the user's forward builds: kept in PyTorch, its length is read from the input (so the answer
    takes any sequence length) and it is made on the input's device, not on the one the program was captured on."""
    from drtriton_ray.capture.export import capture_source
    from drtriton_ray.search.assembly import all_torch

    source = (
        "import torch\nimport torch.nn as nn\n\nbatch_size = 2\nseq_len = 5\n\n\nclass Model(nn.Module):\n"
        "    def forward(self, x):\n        return x + torch.arange(x.shape[1], device=x.device)[:, None]\n\n\n"
        "def get_inputs():\n    return [torch.randn(batch_size, seq_len, 4)]\n\n\n"
        "def get_init_inputs():\n    return []\n"
    )
    graph = capture_source(source, dynamic=["batch_size", "seq_len"])
    module = render_module(source, graph, all_torch(graph), {}, general=True)
    assert "size_seq_len = x.shape[1]" in module and "arange.default(size_seq_len, device=x.device" in module, module
    mine = {}
    exec(compile(module, "<assembled>", "exec"), mine)
    x = torch.randn(3, 7, 4)
    torch.testing.assert_close(mine["ModelNew"]()(x), x + torch.arange(7)[:, None])
