"""Which dims of a captured graph vary with the problem's size constants, found by capturing it again.

A problem in KernelBench's format sizes its inputs with module-level integers (`batch_size = 16`, `seq_len = 512`).
Each constant that may vary is set to another value and the program captured again: the tensor dims that change
are symbolic, each named by an expression of the constants (`batch_size`, `batch_size*seq_len`, `seq_len-1`), and
`Tensor.sym` records it; so are the integer arguments of operators that change (`view(batch_size*seq_len, 64)`,
`arange(seq_len)`), in `Node.sym`. A constant cannot vary, and is reported so, where the graph's structure changes
with it (shape-dependent code), where it sizes a parameter, a buffer or a constant the forward builds, where it sets
an argument that is not an integer, or where a dim or an argument depends on it in a way no such expression
describes.

Which constants are tried: those the caller declares (`--dynamic`), else the module-level integers `get_inputs`
reads that size no last dim of an input (the leading batch and sequence dims, not the feature dims kernels are
specialized for)."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Callable, Optional

from drtriton_ray.capture.errors import CaptureError
from drtriton_ray.ir import TORCH_OP, Graph

Capture = Callable[[dict], Graph]  # the graph of the program with some constants set to other values


@dataclass
class Variation:
    """What one constant's other value changed: dim (tensor id, axis) -> its value there."""

    name: str
    value: int
    dims: dict[tuple[int, int], int] = field(default_factory=dict)
    args: dict[tuple[int, str], int] = field(default_factory=dict)  # (node, param path) -> its value there
    why_not: str = ""  # non-empty: the constant cannot vary


def size_constants(source: str, namespace: dict) -> dict[str, int]:
    """The module-level integers `get_inputs` reads, with their values."""
    tree = ast.parse(source)
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "get_inputs"), None)
    if fn is None:
        return {}
    read = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return {k: namespace[k] for k in sorted(read) if type(namespace.get(k)) is int and namespace[k] > 0}


def structure(graph: Graph) -> list:
    """What must not change for a dim to vary: the operators in order and what each reads and makes."""
    return [
        (n.op, n.params.get("target") if n.op == TORCH_OP else None, n.inputs, n.outputs, n.weights)
        for n in graph.program.nodes
    ]


def vary(base: Graph, name: str, value: int, capture: Capture) -> Variation:
    """Capture with `name` set to another value (value + 1, else 2 * value) and compare with `base`."""
    why = ""
    for other in (value + 1, 2 * value):
        try:
            graph = capture({name: other})
        except CaptureError as e:
            why = f"the program does not run with {name} = {other} ({e})"
            continue
        if structure(graph) != structure(base) or set(graph.program.tensors) != set(base.program.tensors):
            why = f"the graph changes with {name} (code that depends on the shape)"
            continue
        return compare(base, graph, name, other)
    return Variation(name, value, why_not=why)


def compare(base: Graph, graph: Graph, name: str, other: int) -> Variation:
    v = Variation(name, other)
    for tid, t in base.program.tensors.items():
        now = graph.program.tensors[tid].shape
        if len(now) != len(t.shape):
            v.why_not = f"a tensor's rank changes with {name}"
            return v
        for axis, (a, b) in enumerate(zip(t.shape, now)):
            if a != b:
                v.dims[(tid, axis)] = b
                if t.role == "weight":
                    kind = "a constant the forward builds" if tid in base.constants else "a parameter or buffer"
                    v.why_not = f"{name} sizes {kind} ({base.state.get(tid, f'tensor {tid}')})"
                    return v
    for k, (a, b) in enumerate(zip(base.program.nodes, graph.program.nodes)):
        old, new = param_leaves(a.params), param_leaves(b.params)
        for path in [p for p in old if old[p] != new.get(p)]:
            if old.keys() != new.keys() or type(old[path]) is not int or type(new[path]) is not int:
                v.why_not = f"{name} sets operator arguments (node {k}: {a.op})"
                return v
            v.args[(k, path)] = new[path]
    return v


def param_leaves(value, path: str = "") -> dict[str, object]:
    """A node's params by path ("shape.0", "args.0", "kwargs.size.1"); an encoded tensor or dtype is one leaf."""
    if isinstance(value, dict) and not any(str(k).startswith("$") for k in value):
        return {p: v for k, sub in value.items() for p, v in param_leaves(sub, f"{path}{k}.").items()}
    if isinstance(value, (list, tuple)):
        return {p: v for k, sub in enumerate(value) for p, v in param_leaves(sub, f"{path}{k}.").items()}
    return {path.removesuffix("."): value}


def expression(sample: int, changed: list[tuple[Variation, int]], values: dict[str, int]) -> Optional[str]:
    """A size (sample value `sample`) as `k*c1*c2+o` of the constants it depends on (`changed`: the variations that
    changed it, with its value in each), checked against each of them; None if no such expression fits."""
    if len(changed) == 1:
        ((d, now),) = changed
        slope, rest = divmod(now - sample, d.value - values[d.name])
        offset = sample - slope * values[d.name]
        return None if rest else _format(slope, [d.name], offset)
    product = 1
    for d, _ in changed:
        product *= values[d.name]
    slope, rest = divmod(sample, product)
    if rest or any(now != slope * (product // values[d.name]) * d.value for d, now in changed):
        return None
    return _format(slope, [d.name for d, _ in changed], 0)


def _format(slope: int, names: list[str], offset: int) -> Optional[str]:
    if slope <= 0:
        return None
    text = "*".join(([str(slope)] if slope != 1 else []) + names)
    return text + (f"+{offset}" if offset > 0 else f"{offset}" if offset < 0 else "")


def feature_dims(graph: Graph, v: Variation) -> bool:
    """Whether the variation changes the last dim of an input (a feature dim: not inferred as varying)."""
    return any((t, len(graph.program.tensors[t].shape) - 1) in v.dims for t in graph.inputs)


def mark_symbolic(graph: Graph, constants: dict[str, int], capture: Capture, declared: bool) -> None:
    """Capture once per constant, then name the dims that vary (Tensor.sym) and record the constants that do in
    `graph.dims`; what cannot vary, and why, goes to the notes (declared constants always, inferred ones when the
    graph or a parameter depends on them)."""
    ok = []
    for name, value in constants.items():
        v = vary(graph, name, value, capture)
        if v.why_not:
            if declared:
                graph.notes.append(f"{name} cannot vary: {v.why_not}; answers are specialized to {name} = {value}")
        elif declared or not feature_dims(graph, v):
            ok.append(v)
    while ok:
        unnamed = name_dims(graph, ok, constants)
        if not unnamed:
            break
        graph.notes.append(f"{unnamed.name} cannot vary: a dim depends on it in no way a size expression says")
        ok.remove(unnamed)
    graph.dims = {v.name: constants[v.name] for v in ok}


def name_dims(graph: Graph, ok: list[Variation], constants: dict[str, int]) -> Optional[Variation]:
    """Tensor.sym for every dim the variations change and Node.sym for every argument; the first variation whose
    dim or argument no expression fits (the names are then left unset)."""
    names: dict[tuple[int, int], str] = {}
    for key in sorted({k for v in ok for k in v.dims}):
        changed = [(v, v.dims[key]) for v in ok if key in v.dims]
        text = expression(graph.program.tensors[key[0]].shape[key[1]], changed, constants)
        if text is None:
            return changed[0][0]
        names[key] = text
    args: dict[tuple[int, str], str] = {}
    for node, path in sorted({k for v in ok for k in v.args}):
        changed = [(v, v.args[(node, path)]) for v in ok if (node, path) in v.args]
        text = expression(param_leaves(graph.program.nodes[node].params)[path], changed, constants)
        if text is None:
            return changed[0][0]
        args[(node, path)] = text
    for t in graph.program.tensors.values():
        t.sym = []
    for (tid, axis), text in names.items():
        t = graph.program.tensors[tid]
        t.sym = t.sym or [""] * len(t.shape)
        t.sym[axis] = text
    for n in graph.program.nodes:
        n.sym = {}
    for (node, path), text in args.items():
        graph.program.nodes[node].sym[path] = text
    return None
