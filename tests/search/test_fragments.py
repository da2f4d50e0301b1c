"""Fragments of hand-built graphs: enumeration (windows and fusion regions), boundaries with fan-out, weights,
hashing, rendering."""

import copy

import pytest
import torch

from drtriton_ray.ir import TORCH_OP, Graph
from drtriton_ray.search.fragments import enumerate_fragments
from drtriton_ray.ir import Node, Program, Tensor

from search_graphs import mlp_block, renumbered


def by_name(fragments):
    return {f.name: f for f in fragments}


def run_model(source: str):
    """Build the sub-problem's Model and run it on its own inputs (our rendered code, not user code)."""
    scope: dict = {}
    exec(compile(source, "<fragment>", "exec"), scope)
    torch.manual_seed(0)
    model = scope["Model"](*scope["get_init_inputs"]())
    return model, model(*scope["get_inputs"]())


def test_every_contiguous_run_up_to_k():
    g = mlp_block()  # 5 nodes
    for k, expected in ((1, 5), (2, 9), (5, 15), (9, 15)):
        assert len(enumerate_fragments(g, k, longest=0, whole=0)) == expected
    with pytest.raises(ValueError):
        enumerate_fragments(g, 0)
    # beyond the windows: the Linear with its epilogue (GELU, residual Add), one kernel of the lowering, and the
    # whole program (only a cast epilogue grows with its reader apart from its matmul)
    assert [f.name for f in enumerate_fragments(g, 1) if f.size > 1] == ["n0-2", "n0-4"]
    assert len(enumerate_fragments(g, 2)) == 11 and len(enumerate_fragments(g, 3)) == 13
    assert [f.name for f in enumerate_fragments(g, 1, whole=4) if f.size > 1] == ["n0-2"]  # longer than `whole`


def hf_rmsnorm(dtype: str) -> Graph:
    """Llama's RMSNorm as capture writes it: x.to(float32) (a Torch cast where x is not float32), square, mean,
    + eps, rsqrt, x * that, .to(dtype), weight * that."""
    shape, row = [2, 8, 64], [2, 8, 1]
    t = {0: Tensor(0, shape, dtype, "input"), 1: Tensor(1, [64], dtype, "weight", "positive")}
    t |= {i: Tensor(i, shape if i in (2, 3, 7, 8) else row, "float32", "intermediate") for i in range(2, 9)}
    t[8].dtype, t[9] = dtype, Tensor(9, shape, dtype, "output")
    nodes = [
        Node("Square", [2], [3]),
        Node("Mean", [3], [4], {"dim": -1, "keepdim": True}),
        Node("AddScalar", [4], [5], {"value": 1e-6}),
        Node("Rsqrt", [5], [6]),
        Node("Mul", [2, 6], [7]),
        Node("Mul", [1, 8], [9]),
    ]
    if dtype == "float32":  # no casts: x is tensor 2, the last Mul reads tensor 7
        nodes[0].inputs, nodes[4].inputs, nodes[5].inputs = [0], [0, 6], [1, 7]
        t = {i: v for i, v in t.items() if i not in (2, 8)}
    else:
        for k, (src, dst, to) in ((0, (0, 2, "float32")), (6, (7, 8, dtype))):
            params = {"target": "aten._to_copy.default", "args": [{"$t": src}], "kwargs": {"dtype": {"$dtype": to}}}
            nodes.insert(k, Node(TORCH_OP, [src], [dst], params))
    return Graph(Program(nodes, t, dtype, 0), [0], {1: "norm.weight"})


def test_a_written_out_rmsnorm_is_one_fragment():
    """Six nodes, one fusion region (a mean grown through its elementwise neighbours): one fragment spans it,
    though windows stop at five nodes; the tiling may then pick it whole."""
    g = hf_rmsnorm("float32")
    fragments = by_name(enumerate_fragments(g))
    whole = fragments["n0-5"]
    assert whole.ops == ["Square", "Mean", "AddScalar", "Rsqrt", "Mul", "Mul"] and not whole.skip
    assert whole.inputs == [0, 1] and whole.outputs == [9]
    assert len(fragments) == 20 + 1 and "n0-5" not in by_name(enumerate_fragments(g, longest=5, whole=0))
    _, out = run_model(whole.source)  # the sub-problem runs: an RMSNorm of its own input
    assert out.shape == (2, 8, 64)


def test_casts_join_a_region_and_the_region_without_them_stays():
    """Hugging Face's casts around the norm: the region grown through them ring by ring (the first cast and the
    scale, the second cast, the weight: for a policy, the lowering has no cast) and the one without them (what the
    lowering can fuse), besides the lowering's own kernels (+ eps, rsqrt, scale); those longer than k=2, none past
    `longest`."""
    g = hf_rmsnorm("bfloat16")
    long = {f.name: f for f in enumerate_fragments(g, 2) if f.size > 2}
    assert sorted(long) == ["n0-5", "n0-6", "n0-7", "n1-5", "n3-5"]
    assert long["n0-7"].ops[0] == long["n0-7"].ops[6] == "_to_copy.default"
    assert long["n1-5"].ops == ["Square", "Mean", "AddScalar", "Rsqrt", "Mul"]
    capped = by_name(enumerate_fragments(g, 2, longest=7, whole=0))  # grown through the first cast, up to 7 nodes
    assert "n0-7" not in capped and max(f.size for f in capped.values()) == 7


def test_boundaries_follow_fan_out():
    f = by_name(enumerate_fragments(mlp_block()))
    # x (0) feeds the Linear and the residual Add: a fragment without the Linear reads it as an input
    assert f["n2-2"].inputs == [5, 0] and f["n2-2"].outputs == [6]
    # 6 is returned by the graph and read by RMSNorm: an output of every fragment that makes it
    assert f["n0-3"].outputs == [6, 7]
    # 4 and 5 are read only inside n0-2: not outputs
    assert f["n0-2"].outputs == [6]
    assert f["n0-0"].outputs == [4]
    # registry weight slots become the fragment's parameters
    assert f["n0-3"].weights == [1, 2, 3] and f["n3-3"].weights == [3]


def test_state_outside_a_weight_slot_is_an_input():
    g = mlp_block()
    g.program.nodes[2] = Node("Add", [5, 3], [6])  # the norm's weight read as a plain operand
    f = by_name(enumerate_fragments(g))
    assert f["n2-2"].inputs == [5, 3] and f["n2-2"].weights == []
    assert f["n2-3"].weights == [3] and f["n2-3"].inputs == [5]  # also in RMSNorm's slot: one parameter


def test_hash_ignores_tensor_ids_and_sees_params_and_shapes():
    a = enumerate_fragments(mlp_block())
    b = enumerate_fragments(renumbered(mlp_block(), 100))
    assert [f.hash for f in a] == [f.hash for f in b]
    assert [f.source for f in a] == [f.source for f in b]
    assert len({f.hash for f in a}) == len(a)
    g = mlp_block()
    g.program.nodes[3].params = {"k": 2}
    assert by_name(enumerate_fragments(g))["n3-3"].hash != by_name(a)["n3-3"].hash
    g = mlp_block()
    g.program.tensors[0].dtype = "bfloat16"
    assert by_name(enumerate_fragments(g))["n0-0"].hash != by_name(a)["n0-0"].hash


def test_rendered_fragment_runs_like_the_graph():
    f = by_name(enumerate_fragments(mlp_block()))["n0-3"]
    assert "class Model(nn.Module)" in f.source and "self.weight_" in f.source
    assert "nn.Parameter(1.0 + 0.1 * torch.randn(" in f.source  # the norm's weight starts near 1
    scope: dict = {}
    exec(compile(f.source, "<f>", "exec"), scope)
    (x,) = scope["get_inputs"]()
    torch.manual_seed(0)
    model = scope["Model"]()
    h, y = model(x)
    ref_h = torch.nn.functional.gelu(x @ model.weight_1.T + model.weight_2) + x
    assert torch.allclose(h, ref_h, atol=1e-6)
    assert torch.allclose(y, torch.nn.functional.rms_norm(ref_h, (16,), model.weight_3), atol=1e-6)


def test_torch_nodes_only_are_skipped_and_render_through_aten():
    f = by_name(enumerate_fragments(mlp_block()))
    assert f["n4-4"].skip and not f["n3-4"].skip
    assert "torch.ops.aten.mul.Tensor(tensor_" in f["n3-4"].source
    _, out = run_model(f["n3-4"].source)
    assert out.shape == (4, 16)


def multi_output_graph() -> Graph:
    """An integer input drawn from its hint, and a Torch node with two outputs (max with indices)."""
    t = {
        0: Tensor(0, [3, 8], "float32", "input"),
        1: Tensor(1, [3], "int64", "input", init="int:0:8"),
        2: Tensor(2, [3], "float32", "output"),
        3: Tensor(3, [3], "int64", "intermediate"),
        4: Tensor(4, [3], "int64", "output"),
    }
    nodes = [
        Node(TORCH_OP, [0], [2, 3], {"target": "aten.max.dim", "args": [{"$t": 0}, 1], "kwargs": {}}),
        Node(TORCH_OP, [3, 1], [4], {"target": "aten.add.Tensor", "args": [{"$t": 3}, {"$t": 1}], "kwargs": {}}),
    ]
    return Graph(Program(nodes, t, "float32", 0), [0, 1])


def test_multi_output_nodes_and_integer_inputs():
    f = by_name(enumerate_fragments(multi_output_graph()))
    both = f["n0-1"]
    assert both.outputs == [2, 4] and both.inputs == [0, 1]
    assert "torch.randint(0, 8, TENSOR_1_SHAPE, dtype=torch.int64)" in both.source
    assert "tensor_2, tensor_3 = torch.ops.aten.max.dim(tensor_0, 1)" in both.source
    _, (values, idx) = run_model(both.source)
    assert values.dtype == torch.float32 and idx.dtype == torch.int64
    second = f["n1-1"]  # an int intermediate read as an input: drawn in {0, 1}
    assert "torch.randint(0, 2, TENSOR_0_SHAPE, dtype=torch.int64)" in second.source


def test_dead_runs_are_left_out():
    g = copy.deepcopy(mlp_block())
    g.program.tensors[8].role = "intermediate"  # nothing reads or returns the Torch node's output
    names = by_name(enumerate_fragments(g))
    assert "n4-4" not in names and "n3-4" not in names  # they return nothing
    assert names["n3-3"].outputs == [7]  # read by the dead node, which is outside n3-3
    assert names["n2-4"].outputs == [6]
