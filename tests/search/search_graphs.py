"""Graphs built by hand (what capture produces), for the search's unit tests."""

from drtriton_ray.ir import TORCH_OP, Graph
from drtriton_ray.ir import Node, Program, Tensor


def mlp_block() -> Graph:
    """x -> Linear(fc) -> GELU -> + x (fan-out of x) -> RMSNorm(norm) -> Torch mul by 2 -> out, h returned too.

    Tensors: 0 x (input), 1 fc.weight, 2 fc.bias, 3 norm.weight, 4..8 made by the nodes."""
    t = {
        0: Tensor(0, [4, 16], "float32", "input"),
        1: Tensor(1, [16, 16], "float32", "weight"),
        2: Tensor(2, [16], "float32", "weight"),
        3: Tensor(3, [16], "float32", "weight"),
        4: Tensor(4, [4, 16], "float32", "intermediate"),
        5: Tensor(5, [4, 16], "float32", "intermediate"),
        6: Tensor(6, [4, 16], "float32", "output"),
        7: Tensor(7, [4, 16], "float32", "intermediate"),
        8: Tensor(8, [4, 16], "float32", "output"),
    }
    nodes = [
        Node("Linear", [0], [4], {}, [1, 2]),
        Node("GELU", [4], [5]),
        Node("Add", [5, 0], [6]),
        Node("RMSNorm", [6], [7], {"k": 1}, [3]),
        Node(TORCH_OP, [7], [8], {"target": "aten.mul.Tensor", "args": [{"$t": 7}, 2.0], "kwargs": {}}),
    ]
    state = {1: "fc.weight", 2: "fc.bias", 3: "norm.weight"}
    return Graph(Program(nodes, t, "float32", 0), [0], state)


def norm_block(width: int) -> Graph:
    """x (3 rows of `width` values) -> RMSNorm -> ReLU -> out."""
    t = {
        0: Tensor(0, [3, width], "float32", "input"),
        1: Tensor(1, [width], "float32", "weight"),
        2: Tensor(2, [3, width], "float32", "intermediate"),
        3: Tensor(3, [3, width], "float32", "output"),
    }
    nodes = [Node("RMSNorm", [0], [2], {"k": 1}, [1]), Node("ReLU", [2], [3])]
    return Graph(Program(nodes, t, "float32", 0), [0], {1: "norm.weight"})


MLP_BLOCK_SOURCE = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)
        self.norm = nn.RMSNorm(16)

    def forward(self, x):
        h = F.gelu(self.fc(x)) + x
        return h, self.norm(h) * 2.0


def get_inputs():
    return [torch.randn(4, 16)]


def get_init_inputs():
    return []
"""


def renumbered(graph: Graph, shift: int) -> Graph:
    """The same graph with every tensor id moved by `shift`: the fragments' hashes must not change."""
    p = graph.program

    def m(i):
        return i + shift

    def remap(v):
        if isinstance(v, dict):
            return {"$t": m(v["$t"])} if "$t" in v else {k: remap(x) for k, x in v.items()}
        return [remap(x) for x in v] if isinstance(v, list) else v

    tensors = {m(i): Tensor(m(i), x.shape, x.dtype, x.role, x.init) for i, x in p.tensors.items()}
    nodes = [
        Node(n.op, [m(i) for i in n.inputs], [m(i) for i in n.outputs], remap(n.params), [m(i) for i in n.weights])
        for n in p.nodes
    ]
    return Graph(
        Program(nodes, tensors, p.dtype, 0), [m(i) for i in graph.inputs], {m(k): v for k, v in graph.state.items()}
    )
