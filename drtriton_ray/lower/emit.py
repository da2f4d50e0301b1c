"""The reference lowering: a synthesized program (its DAG) to a standalone KernelBench solution,
`class ModelNew` whose forward launches Triton kernels only.

One kernel per operator, except that elementwise operators are fused: an elementwise node whose
output has exactly one consumer, itself elementwise, and is not a program output joins that
consumer's group; each group (a sub-DAG with one sink) becomes one generated kernel launched where
its sink stood. The kernels and wrappers are copied from `lower/kernels.py` and `lower/wrappers.py`,
so the emitted module needs nothing but torch and triton.
"""

from __future__ import annotations

import ast
import inspect

from drtriton_ray.lower import kernels, wrappers
from drtriton_ray.lower.elementwise import expression, fused_kernel_source, is_elementwise
from drtriton_ray.synth.dag import Node, Program
from drtriton_ray.synth.render import forward_signature

HEADER = "import torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n"

REDUCE_OPS = {"Sum": 0, "Mean": 1, "Max": 2, "Min": 3, "ArgMax": 4, "ArgMin": 5, "Var": 6, "Norm": 7}
ALONG_OPS = {"Softmax": 0, "LogSoftmax": 1, "CumSum": 2, "CumMax": 3, "CumMin": 4}


class NotLowerable(Exception):
    """The lowering has no kernel for this operator yet."""


def _call(node: Node, out_shape: list[int]) -> str:
    """The forward line's right-hand side for a non-elementwise node."""
    x = [f"tensor_{i}" for i in node.inputs]
    w = [f"self.weight_{i}" for i in node.weights]
    p = node.params
    if node.op in REDUCE_OPS:
        return f"reduce_dim({x[0]}, {p['dim']}, {p['keepdim']}, {REDUCE_OPS[node.op]})"
    if node.op in ALONG_OPS:
        return f"along_dim({x[0]}, {p['dim']}, {ALONG_OPS[node.op]})"
    calls = {
        "Matmul": lambda: f"matmul({x[0]}, {x[1]})",
        "Bmm": lambda: f"matmul({x[0]}, {x[1]})",
        "Linear": lambda: f"linear({x[0]}, {w[0]}, {w[1]})",
        "BatchNorm": lambda: f"batch_norm({x[0]}, {w[0]}, {w[1]})",
        "LayerNorm": lambda: f"layer_norm({x[0]}, {w[0]}, {w[1]})",
        "RMSNorm": lambda: f"rms_norm({x[0]}, {w[0]})",
        "GroupNorm": lambda: f"group_norm({x[0]}, {p.get('num_groups')}, {w[0]}, {w[1]})",
        "InstanceNorm": lambda: f"instance_norm({x[0]})",
        "Transpose": lambda: f"transpose({x[0]}, {p.get('dim0')}, {p.get('dim1')})",
        "Triu": lambda: f"triangle({x[0]}, {p.get('diagonal')}, True)",
        "Tril": lambda: f"triangle({x[0]}, {p.get('diagonal')}, False)",
        "Cat": lambda: f"cat({x[0]}, {x[1]}, {p.get('dim')})",
        "Stack": lambda: f"stack({x[0]}, {x[1]}, {p.get('dim')})",
        "LinearNoBias": lambda: f"linear({x[0]}, {w[0]}, None)",
        "View": lambda: f"reshape_view({x[0]}, {tuple(p.get('shape', ()))})",
        "Permute": lambda: f"permute_copy({x[0]}, {tuple(p.get('dims', ()))})",
        "Expand": lambda: f"expand_copy({x[0]}, {tuple(p.get('shape', ()))})",
        "Narrow": lambda: f"narrow_copy({x[0]}, {p.get('dim')}, {p.get('start')}, {p.get('length')})",
        "Select": lambda: f"select_copy({x[0]}, {p.get('dim')}, {p.get('index')})",
    }
    if node.op.startswith(("Conv", "AvgPool", "MaxPool")):
        out_shape = tuple(out_shape)
        if node.op.startswith("Conv"):
            return (
                f"conv({x[0]}, {w[0]}, {w[1]}, {out_shape}, {p['stride']}, {p['padding']}, {p['dilation']}, "
                f"{p['groups']}, {node.op.startswith('ConvTranspose')})"
            )
        return f"pool({x[0]}, {out_shape}, {p['kernel']}, {p['stride']}, {p['padding']}, {node.op.startswith('Max')})"
    if node.op not in calls:
        raise NotLowerable(f"no Triton lowering for {node.op} yet")
    return calls[node.op]()


def fusion_groups(p: Program) -> list[list[int]]:
    """Node indices grouped for fusion, each group in program order, its sink last."""
    consumers: dict[int, list[int]] = {}
    for k, n in enumerate(p.nodes):
        for t in n.inputs:
            consumers.setdefault(t, []).append(k)
    outputs = set(p.outputs)
    sink_of = list(range(len(p.nodes)))
    for k in reversed(range(len(p.nodes))):  # consumers come later: their sinks are known
        n = p.nodes[k]
        users = consumers.get(n.outputs[0], [])
        if (
            is_elementwise(n.op)
            and n.outputs[0] not in outputs
            and len(users) == 1
            and is_elementwise(p.nodes[users[0]].op)
        ):
            sink_of[k] = sink_of[users[0]]
    groups: dict[int, list[int]] = {}
    for k in range(len(p.nodes)):
        groups.setdefault(sink_of[k], []).append(k)
    return [groups[s] for s in sorted(groups)]


def _fused(p: Program, group: list[int], name: str) -> tuple[str, str]:
    """(kernel and wrapper source, forward line) for one elementwise group."""
    inside = {p.nodes[k].outputs[0] for k in group}
    leaves: list[int] = []
    for k in group:
        for t in p.nodes[k].inputs:
            if t not in inside and t not in leaves:
                leaves.append(t)
    names = {t: f"v{j}" for j, t in enumerate(leaves)}
    body = []
    for k in group:
        n = p.nodes[k]
        out = n.outputs[0]
        names[out] = f"t{out}"
        body.append(f"t{out} = {expression(n.op, [names[t] for t in n.inputs], n.params)}")
    sink = p.nodes[group[-1]].outputs[0]
    shape = tuple(p.tensors[sink].shape)
    dense = [tuple(p.tensors[t].shape) == shape for t in leaves]
    args = ", ".join(f"x{j}" for j in range(len(leaves)))
    wrapper = "\n".join(
        [
            f"def {name}({args}):",
            f"    out, grid, kernel_args, wide = elementwise_args({shape}, DTYPE, {dense}, {args})",
            f"    {name}_kernel[grid](*kernel_args, BLOCK=1024, WIDE=wide)",
            "    return out",
            "",
        ]
    )
    line = f"tensor_{sink} = {name}({', '.join(f'tensor_{t}' for t in leaves)})"
    return fused_kernel_source(f"{name}_kernel", dense, body, f"t{sink}") + "\n\n" + wrapper, line


def _definitions(module) -> dict[str, tuple[str, set[str]]]:
    """A module's top-level functions: name -> (source verbatim with decorators, names it uses)."""
    source = inspect.getsource(module)
    lines = source.splitlines()
    out = {}
    for f in ast.parse(source).body:
        if isinstance(f, ast.FunctionDef):
            start = min([f.lineno] + [d.lineno for d in f.decorator_list])
            used = {n.id for n in ast.walk(f) if isinstance(n, ast.Name)}
            out[f.name] = ("\n".join(lines[start - 1 : f.end_lineno]) + "\n", used)
    return out


LIBRARY = {**_definitions(kernels), **_definitions(wrappers)}  # kernels first: wrappers launch them


def library_source(lines: list[str]) -> str:
    """The kernels and wrappers the forward lines need, transitively, in library order."""
    needed: set[str] = set()
    frontier = {n.id for line in lines for n in ast.walk(ast.parse(line.strip())) if isinstance(n, ast.Name)}
    while frontier:
        name = frontier.pop()
        if name in LIBRARY and name not in needed:
            needed.add(name)
            frontier |= LIBRARY[name][1]
    return "\n\n".join(src for name, (src, _) in LIBRARY.items() if name in needed)


def _problem_parts(source: str) -> tuple[list[str], list[str]]:
    """The problem's module-level assignments and its Model.__init__ statements, verbatim: the
    solution must create the same parameters in the same order to get the same values."""
    tree = ast.parse(source)
    lines = source.splitlines()

    def text(node):
        return lines[node.lineno - 1 : node.end_lineno]

    constants = [line for n in tree.body if isinstance(n, ast.Assign) for line in text(n)]
    model = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model")
    init = next(n for n in model.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    body = [n for n in init.body if not (isinstance(n, ast.Expr) and "super()" in ast.unparse(n))]
    indent = init.body[0].col_offset if init.body else 8
    return constants, [line[indent:] for n in body for line in text(n)]


def lower_program(p: Program, problem_source: str) -> str:
    """The full candidate module for program p, whose problem text is `problem_source`."""
    kernels_src: list[str] = []
    forward: list[str] = []
    for g, group in enumerate(fusion_groups(p)):
        sink = p.nodes[group[-1]]
        if is_elementwise(sink.op):
            src, line = _fused(p, group, f"fused_{g}")
            kernels_src.append(src)
            forward.append(line)
        else:
            forward.append(f"tensor_{sink.outputs[0]} = {_call(sink, p.tensors[sink.outputs[0]].shape)}")
    outs = [f"tensor_{o}" for o in p.outputs]
    forward.append("return " + (outs[0] if len(outs) == 1 else "(" + ", ".join(outs) + ")"))
    constants, init = _problem_parts(problem_source)
    library = library_source(forward + kernels_src)
    body = [HEADER] + constants + ["", ""] + ([library, ""] if library else []) + ["\n\n".join(kernels_src)]
    body += [
        "",
        "class ModelNew(nn.Module):",
        '    """Reference Triton lowering (drtriton_ray.lower)."""',
        "",
        "    def __init__(self):",
        "        super().__init__()",
    ]
    body += [f"        {line}" for line in init] or []
    body += ["", f"    {forward_signature(p)}"] + [f"        {line}" for line in forward] + [""]
    return "\n".join(body)


def lower_source(problem_source: str) -> str:
    """Lower a problem given as KernelBench source (see lower/parse.py for what it accepts)."""
    from drtriton_ray.lower.parse import program_from_source

    return lower_program(program_from_source(problem_source), problem_source)
