"""The one program form: `Program` (tensors and nodes), `Graph` (a program bound to a user's module), `Problem`
(KernelBench-format source and its program), their serialisation and the one renderer to PyTorch source."""

from drtriton_ray.ir.graph import Graph
from drtriton_ray.ir.problem import Problem, load_problem
from drtriton_ray.ir.program import TORCH_OP, Node, Program, Tensor
from drtriton_ray.ir.render import functional_source, graph_source, node_line, problem_source

__all__ = [
    "TORCH_OP",
    "Graph",
    "Node",
    "Problem",
    "Program",
    "Tensor",
    "functional_source",
    "graph_source",
    "load_problem",
    "node_line",
    "problem_source",
]
