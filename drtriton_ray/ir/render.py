"""Programs as PyTorch source: the one renderer of nodes, used for every form a program takes as text.

- `problem_source`: KernelBench's problem format (`Model`, `get_inputs`, `get_init_inputs`), for a synthesized
  program and for a fragment of a captured one alike. Tensor `k` is `tensor_k`, weight `k` is `self.weight_k`, with
  shape constants `TENSOR_k_SHAPE` / `WEIGHT_k_SHAPE` and `DTYPE`.
- `functional_source`: DRTriton's flat form, one `tensor_k = op(...)` line per node, weights as arguments.
- `graph_source`: a captured graph as one function of its inputs and weights (capture's replay).
- `node_line`: one node's forward line, which the search's assembly also uses for the nodes an answer keeps in
  PyTorch.
"""

from __future__ import annotations

import math
import re
from typing import Callable, Optional

from drtriton_ray.ir.graph import Graph
from drtriton_ray.ir.program import TORCH_OP, Node, Program, Tensor
from drtriton_ray.ops.registry import REGISTRY

HEADER = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"
FLOAT_PREFIXES = ("float", "bfloat")
SIZE_NAME = re.compile(r"[A-Za-z_]\w*")  # the constants in a symbolic dim's expression
Namer = Callable[[int], str]
SizeCode = Callable[[str], str]  # a symbolic size's expression -> the code that computes it where a node is rendered


def literal(value, name: Namer) -> str:
    """Python source for one encoded Torch-node argument; `name(id)` gives a tensor's expression."""
    if isinstance(value, dict):
        if "$t" in value:
            return name(value["$t"])
        if "$dtype" in value:
            return f"torch.{value['$dtype']}"
        if "$device" in value:
            return f"torch.device({value['$device']!r})"
        if "$memory_format" in value:
            return f"torch.{value['$memory_format']}"
        if "$layout" in value:
            return f"torch.{value['$layout']}"
        raise ValueError(f"unknown encoded argument {value!r}")
    if isinstance(value, list):
        return "[" + ", ".join(literal(v, name) for v in value) + "]"
    if isinstance(value, float):
        return repr(value) if value == value and abs(value) != float("inf") else f"float({str(value)!r})"
    return repr(value)


def torch_call(params: dict, name: Namer) -> str:
    """The PyTorch expression of a Torch node's params: `torch.ops.aten.<op>.<overload>(args, kw=...)`."""
    args = [literal(a, name) for a in params["args"]]
    args += [f"{k}={literal(v, name)}" for k, v in params.get("kwargs", {}).items()]
    return f"torch.ops.{params['target']}({', '.join(args)})"


def size_expr(expr: str) -> str:
    """A size expression as source over the problem's size constants."""
    return expr if expr.isidentifier() else f"({expr})"


def node_expr(n: Node, name: Namer, sizes: Optional[SizeCode] = None) -> str:
    """A node's expression; `sizes`: how its symbolic arguments are written (None: their sample values)."""
    params = n.sized_params(sizes) if sizes and n.sym else n.params
    if n.op == TORCH_OP:
        return torch_call(params, name)
    return REGISTRY[n.op].render([name(i) for i in n.inputs], [name(w) for w in n.weights], params)


def node_line(n: Node, name: Namer, first_of: str = "", sizes: Optional[SizeCode] = None) -> str:
    """A node's forward line; a node with several outputs unpacks them. `first_of`: the name of a function that
    takes the first of a sequence, applied to a one-output Torch call (an ATen call may return a 1-tuple);
    `sizes`: see node_expr."""
    expr = node_expr(n, name, sizes)
    if first_of and n.op == TORCH_OP and len(n.outputs) == 1:
        expr = f"{first_of}({expr})"
    return f"{', '.join(name(o) for o in n.outputs)} = {expr}"


def _shape_const(t: Tensor) -> str:
    kind = "WEIGHT" if t.role == "weight" else "TENSOR"
    return f"{kind}_{t.id}_SHAPE"


def _tuple(shape: list[int]) -> str:
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def _init_expr(t: Tensor) -> str:
    rand = f"torch.randn({_shape_const(t)}, dtype=DTYPE)"
    if t.init == "fan_in":
        fan_in = math.prod(t.shape[1:]) or 1
        return f"{rand} * {1 / math.sqrt(fan_in):.6g}"
    if t.init == "one":
        return f"1.0 + 0.1 * {rand}"
    return f"0.1 * {rand}"


def _shape_expr(t: Tensor) -> str:
    """The shape as source: each symbolic dim by its expression of the size constants, the others as numbers."""
    return _tuple([name or size for name, size in zip(t.dim_names(), t.shape)])


def size_names(p: Program) -> list[str]:
    """The size constants the program's symbolic dims are expressions of, in order of first appearance."""
    found: dict[str, None] = {}
    for expr in [e for t in p.tensors.values() for e in t.sym] + [e for n in p.nodes for e in n.sym.values()]:
        found.update(dict.fromkeys(SIZE_NAME.findall(expr)))
    return list(found)


def module_constants(p: Program, sizes: Optional[dict[str, int]] = None) -> list[str]:
    """DTYPE, the size constants (symbolic dims; values from `sizes`, else the dims' own sample values) and the
    shape constants: the problem's, repeated verbatim by a solution."""
    weights = [p.tensors[i] for i in p.weights]
    known = {**p.dims(), **(sizes or {})}
    return (
        [f"DTYPE = torch.{p.dtype}"]
        + [f"{name} = {known[name]}" for name in size_names(p)]
        + [f"{_shape_const(t)} = {_shape_expr(t)}" for t in [p.tensors[i] for i in p.inputs] + weights]
    )


def parameter_lines(p: Program) -> list[str]:
    """`__init__` body lines creating the parameters, in the order a solution must repeat; a weight of another
    dtype than the program's keeps its own."""
    lines = []
    for t in (p.tensors[i] for i in p.weights):
        line = f"self.weight_{t.id} = nn.Parameter({_init_expr(t)})"
        lines.append(line if t.dtype == p.dtype else line.replace("dtype=DTYPE", f"dtype=torch.{t.dtype}"))
    return lines


def forward_signature(p: Program) -> str:
    return f"def forward(self, {', '.join(f'tensor_{i}' for i in p.inputs)}):"


def _dtype_ref(dtype: str, main: str) -> str:
    return "DTYPE" if dtype == main else f"torch.{dtype}"


def draw_expr(t: Tensor, main: str) -> str:
    """get_inputs()'s expression for one input, from its draw hint (ir/graph.py): integer and boolean tensors keep
    their range (the verifier redraws only floating inputs), floating ones the user's distribution. A shape with
    symbolic dims is written out, so that get_inputs() reads the size constants when called (the verifier sets
    them to other values to check other shapes)."""
    shape = _shape_expr(t) if any(t.sym) else f"TENSOR_{t.id}_SHAPE"
    d = _dtype_ref(t.dtype, main)
    if t.dtype == "bool":
        return f"torch.rand({shape}) < 0.5"
    if not t.dtype.startswith(FLOAT_PREFIXES):  # integers: the hint's range, else {0, 1}; a quarter its sentinel
        lo, hi, *sentinel = t.init.split(":")[1:] if t.init.startswith("int:") else ("0", "2")
        draw = f"torch.randint({lo}, {hi}, {shape}, dtype={d})"
        return f"torch.where(torch.rand({shape}) < 0.25, {sentinel[0]}, {draw})" if sentinel else draw
    if t.init.startswith("int:"):
        lo, hi = t.init.split(":")[1:3]
        return f"torch.randint({lo}, {hi}, {shape}).to({d})"
    return {
        "uniform": f"torch.rand({shape}, dtype={d})",
        "positive": f"0.5 + torch.rand({shape}, dtype={d})",
        "bool": f"(torch.rand({shape}) < 0.5).to({d})",
    }.get(t.init, f"torch.randn({shape}, dtype={d})")


def _returned(p: Program) -> str:
    outs = [f"tensor_{o}" for o in p.outputs]
    return outs[0] if len(outs) == 1 else "(" + ", ".join(outs) + ")"


def problem_source(p: Program, title: str = "", sizes: Optional[dict[str, int]] = None) -> str:
    """The program in KernelBench's problem format; `title` is the Model's docstring (default: its operators);
    `sizes`: the values of the size constants its symbolic dims use (default: the dims' own sample values)."""

    def name(t: int) -> str:
        return f"self.weight_{t}" if p.tensors[t].role == "weight" else f"tensor_{t}"

    out = [HEADER] + module_constants(p, sizes)
    out += [
        "",
        "",
        "class Model(nn.Module):",
        f'    """{title or " -> ".join(p.ops)}"""',
        "",
        "    def __init__(self):",
    ]
    out += ["        super().__init__()"] + [f"        {line}" for line in parameter_lines(p)]
    out += ["", f"    {forward_signature(p)}"] + [f"        {node_line(n, name, sizes=size_expr)}" for n in p.nodes]
    out += [f"        return {_returned(p)}", "", ""]
    draws = ", ".join(draw_expr(p.tensors[i], p.dtype) for i in p.inputs)
    out += ["def get_inputs():", f"    return [{draws}]", "", "", "def get_init_inputs():", "    return []", ""]
    return "\n".join(out)


def functional_source(p: Program) -> str:
    """DRTriton's flat form: one `tensor_k = op(...)` line per node; weights are arguments."""
    args = [f"tensor_{i}" for i in p.inputs] + [f"weight_{i}" for i in p.weights]

    def name(t: int) -> str:
        return f"weight_{t}" if p.tensors[t].role == "weight" else f"tensor_{t}"

    out = [HEADER, "", f"def fused_operator({', '.join(args)}):"]
    out += [f"    {node_line(n, name)}" for n in p.nodes]
    out += ["    return [" + ", ".join(f"tensor_{o}" for o in p.outputs) + "]", ""]
    return "\n".join(out)


def graph_source(graph: Graph) -> str:
    """`def graph_forward(<inputs>, <weights in id order>)` returning the list of outputs (buffer updates too);
    every tensor, weights too, is `tensor_<id>`."""

    def name(t: int) -> str:
        return f"tensor_{t}"

    args = ", ".join(name(t) for t in graph.inputs + graph.weights)
    body = [f"    {node_line(n, name, first_of='one')}" for n in graph.program.nodes]
    body.append("    return [" + ", ".join(name(t) for t in graph.outputs) + "]")
    one = "def one(x):\n    return x[0] if isinstance(x, (tuple, list)) else x\n"
    header = "import torch\nimport torch.nn.functional as F\n"
    return "\n".join([header, one, "", f"def graph_forward({args}):", *body, ""])
