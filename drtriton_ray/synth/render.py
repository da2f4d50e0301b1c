"""Programs as source: KernelBench's problem format, and the flat functional form that
test-time search cuts into fragments. Tensor `k` is `tensor_k` in both; weight `k` is
`self.weight_k` in the module and the argument `weight_k` in the functional form."""

from __future__ import annotations

import math

from drtriton_ray.ops import REGISTRY
from drtriton_ray.synth.dag import Program, Tensor

HEADER = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"


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


def _body(p: Program, weight_ref) -> list[str]:
    lines = []
    for n in p.nodes:
        spec = REGISTRY[n.op]
        expr = spec.render([f"tensor_{i}" for i in n.inputs], [weight_ref(w) for w in n.weights], n.params)
        lines.append(f"tensor_{n.outputs[0]} = {expr}")
    return lines


def _returned(p: Program) -> str:
    outs = [f"tensor_{o}" for o in p.outputs]
    return outs[0] if len(outs) == 1 else "(" + ", ".join(outs) + ")"


def module_constants(p: Program) -> list[str]:
    """DTYPE and the shape constants: the problem's, repeated verbatim by a solution."""
    weights = [t for t in p.tensors.values() if t.role == "weight"]
    return [f"DTYPE = torch.{p.dtype}"] + [
        f"{_shape_const(t)} = {_tuple(t.shape)}" for t in [p.tensors[i] for i in p.inputs] + weights
    ]


def parameter_lines(p: Program) -> list[str]:
    """`__init__` body lines creating the parameters, in the order a solution must repeat."""
    return [f"self.weight_{t.id} = nn.Parameter({_init_expr(t)})" for t in p.tensors.values() if t.role == "weight"]


def forward_signature(p: Program) -> str:
    return f"def forward(self, {', '.join(f'tensor_{i}' for i in p.inputs)}):"


def kernelbench_source(p: Program, title: str = "") -> str:
    out = [HEADER] + module_constants(p)
    doc = title or " -> ".join(p.ops)
    out += [
        "",
        "",
        "class Model(nn.Module):",
        f'    """{doc}"""',
        "",
        "    def __init__(self):",
        "        super().__init__()",
    ]
    out += [f"        {line}" for line in parameter_lines(p)]
    out += ["", f"    {forward_signature(p)}"]
    out += [f"        {line}" for line in _body(p, lambda w: f"self.weight_{w}")]
    out += [f"        return {_returned(p)}", "", "", "def get_inputs():"]
    draws = ", ".join(f"torch.randn({_shape_const(p.tensors[i])}, dtype=DTYPE)" for i in p.inputs)
    out += ["    return [" + draws + "]"]
    out += ["", "", "def get_init_inputs():", "    return []", ""]
    return "\n".join(out)


def functional_source(p: Program) -> str:
    """DRTriton's flat form: one `tensor_k = op(...)` line per node; weights are arguments."""
    args = [f"tensor_{i}" for i in p.inputs] + [f"weight_{t.id}" for t in p.tensors.values() if t.role == "weight"]
    out = [HEADER, "", f"def fused_operator({', '.join(args)}):"]
    out += [f"    {line}" for line in _body(p, lambda w: f"weight_{w}")]
    out += ["    return [" + ", ".join(f"tensor_{o}" for o in p.outputs) + "]", ""]
    return "\n".join(out)
