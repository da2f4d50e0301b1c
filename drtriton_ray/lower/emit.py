"""The reference lowering: a synthesized program (its DAG) to a standalone KernelBench solution,
`class ModelNew` whose forward launches Triton kernels only.

One kernel per fragment (`fragments`). Elementwise operators group first: an elementwise node whose output has
exactly one consumer, itself elementwise, and is not a program output joins that consumer's group (a sub-DAG
with one sink). Every other operator anchors a fragment, and takes a group that only it consumes: as its EPILOGUE
a group fed by its output, applied before its kernel stores (matmul + bias + ReLU is one kernel), else as its
PROLOGUE a group whose result it alone reads, computed on the values it loads (ReLU + Sum is one kernel); an
intermediate inside a fragment is never written. A group left over is a kernel of its own. Kernels and wrappers
come from `lower/kernels.py` and `lower/wrappers.py`, verbatim for an operator alone, specialized and fused by
`lower/fuse.py` otherwise (one generated kernel and wrapper per fragment), so the emitted module needs nothing but
torch and triton. Launch configurations tuned per GPU and shape (`lower/tuning.py`) are baked in as literals.
"""

from __future__ import annotations

import ast
import inspect
import math
import textwrap

import torch
from dataclasses import dataclass, field

from drtriton_ray.lower import kernels, wrappers
from drtriton_ray.lower.elementwise import expression, fused_kernel_source, is_elementwise
from drtriton_ray.lower.fuse import Side, fused_anchor_source
from drtriton_ray.lower.specialize import specialize
from drtriton_ray.lower.tuning import config_for, gpu_name, kernel_dims, resolved
from drtriton_ray.ir import Node, Program, Tensor
from drtriton_ray.ir.render import forward_signature

HEADER = "import torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n"

REDUCE_OPS = {"Sum": 0, "Mean": 1, "Max": 2, "Min": 3, "ArgMax": 4, "ArgMin": 5, "Var": 6, "Norm": 7}
ALONG_OPS = {"Softmax": 0, "LogSoftmax": 1, "CumSum": 2, "CumMax": 3, "CumMin": 4}
NORM_MODES = {"LayerNorm": 0, "RMSNorm": 1, "GroupNorm": 2, "InstanceNorm": 3, "BatchNorm": 4}


class NotLowerable(Exception):
    """The lowering has no kernel for this operator yet."""


def launch_call(node: Node, in_shape: list[int], out_shape: list[int], config: dict | None = None) -> str:
    """The forward line's right-hand side for a non-elementwise node (a tuned launch config as a last argument; a
    conv's "SMALL", see tuning.resolved, picks its wrapper and is not passed on)."""
    small, config = split_small(config)
    call = _plain_call(node, in_shape, out_shape, small)
    if not config or call.startswith(("transpose", "triangle", "cat", "stack")):
        return call
    return f"{call[:-1]}, {config!r})"


def _norm(node: Node, w: list[str]) -> tuple[int, int, str | None, str | None]:
    """(mode, groups, weight, bias) of a norm node (split_norm_setup's modes), its weights named as in w."""
    weight, bias = (w + [None, None])[:2]
    return NORM_MODES[node.op], node.params.get("num_groups") if node.op == "GroupNorm" else 1, weight, bias


def is_split_norm(node: Node, shape) -> bool:
    """Whether a norm over `shape` has few long rows: split_norm's two kernels, not a program per row."""
    dims = kernel_dims(node.op, node.params, [list(shape)], []) if node.op in NORM_MODES else None
    return dims is not None and dims[0] == "split_norm"


def is_persistent_norm(node: Node, shape) -> bool:
    """Whether a layer or RMS norm over `shape` has many rows of 4097 to 8192 values: row_norm_persistent_kernel."""
    dims = kernel_dims(node.op, node.params, [list(shape)], []) if node.op in NORM_MODES else None
    return dims is not None and dims[0] == "row_norm_persistent_kernel"


def split_small(config: dict | None) -> tuple[bool, dict | None]:
    """(whether a conv launches conv_small_kernel, the config for its wrapper): the emitter's choice, not a launch
    constant."""
    rest = {k: v for k, v in (config or {}).items() if k != "SMALL"}
    return bool((config or {}).get("SMALL")), rest or None


def _plain_call(node: Node, in_shape: list[int], out_shape: list[int], small: bool = False) -> str:
    x = [f"tensor_{i}" for i in node.inputs]
    w = [f"self.weight_{i}" for i in node.weights]
    p = node.params
    if is_split_norm(node, in_shape):
        mode, groups, weight, bias = _norm(node, w)
        return f"split_norm({x[0]}, {weight}, {bias}, {mode}, {groups})"
    if is_persistent_norm(node, in_shape):
        mode, _, weight, bias = _norm(node, w)
        return f"row_norm_persistent({x[0]}, {weight}, {bias}, {mode})"
    if node.op == "NormReduce":
        mode, _, weight, bias = _norm(Node(p["norm"], [], []), w)
        return f"norm_reduce({x[0]}, {weight}, {bias}, {mode}, {p['dim']}, {p['keepdim']}, {REDUCE_OPS[p['op']]})"
    if node.op == "SoftmaxReduce":
        log, op = ALONG_OPS[p["softmax"]], REDUCE_OPS[p["op"]]
        return f"softmax_reduce({x[0]}, {p['sdim']}, {log}, {p['dim']}, {p['keepdim']}, {op})"
    if node.op in REDUCE_OPS:
        return f"reduce_dim({x[0]}, {p['dim']}, {p['keepdim']}, {REDUCE_OPS[node.op]})"
    if node.op in ALONG_OPS:
        outer, extent, inner = wrappers.split_at(in_shape, p["dim"])
        call = "along_dim_long" if wrappers.long_column(extent, inner) else "along_dim"
        return f"{call}({x[0]}, {p['dim']}, {ALONG_OPS[node.op]})"
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
                f"{'conv_small' if small else 'conv'}({x[0]}, {w[0]}, {w[1]}, {out_shape}, {p['stride']}, "
                f"{p['padding']}, {p['dilation']}, "
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


LAYOUT_OPS = ("Transpose", "Permute")  # copies by transpose_tile_kernel, which takes an epilogue


def permutation(node: Node, ndim: int) -> tuple:
    """A Transpose's or Permute's dims, as x.permute takes them (non-negative)."""
    p = node.params
    dims = p["dims"] if node.op == "Permute" else wrappers.swapped(ndim, p["dim0"], p["dim1"])
    return tuple(d % ndim for d in dims)


def view_layouts(p: Program) -> set[int]:
    """The Transpose/Permute nodes emitted as views (reshape_view): those moving only size-1 dims, whose result has
    its input's layout already, of a tensor a kernel of the program wrote. Of a program input (or a view of one)
    the copy stays: the forward must launch a kernel its result depends on (the verifier's launch and faithfulness
    checks)."""
    aliased, views = set(p.inputs), set()
    for k, n in enumerate(p.nodes):
        if n.op in LAYOUT_OPS and n.inputs[0] not in aliased:
            shape = p.tensors[n.inputs[0]].shape
            moved = [d for d in permutation(n, len(shape)) if shape[d] != 1]
            if moved == sorted(moved):
                views.add(k)
        elif n.op == "View" and n.inputs[0] in aliased:
            aliased.add(n.outputs[0])
    return views


NORMS = ("LayerNorm", "RMSNorm", "GroupNorm", "InstanceNorm", "BatchNorm")
PROLOGUE_OPS = frozenset([*REDUCE_OPS, *ALONG_OPS, *NORMS, "NormReduce", "SoftmaxReduce"])


def epilogue_ok(node: Node) -> bool:
    """Whether a node's kernel can apply an epilogue: everything with a float output stored at a flat index."""
    op = node.params["op"] if node.op == "SoftmaxReduce" else node.op  # the reduction's output
    fused = op in PROLOGUE_OPS and op not in ("ArgMax", "ArgMin", "NormReduce")  # NormReduce: partial results
    return fused or op in ("Matmul", "Bmm", "Linear", *LAYOUT_OPS) or op.startswith(("Conv", "AvgPool", "MaxPool"))


@dataclass
class Fragment:
    """One kernel: a non-elementwise node (anchor) with the elementwise groups fused before and after it, or an
    elementwise group alone (anchor None, its nodes in `epilogue`)."""

    anchor: int | None
    prologue: list[int] = field(default_factory=list)
    epilogue: list[int] = field(default_factory=list)

    @property
    def position(self) -> int:
        """Where its forward line goes: after the last of its nodes (all it reads exists by then)."""
        return max(self.prologue + self.epilogue + ([] if self.anchor is None else [self.anchor]))


def fragments(p: Program, fuse: bool = True) -> list[Fragment]:
    """The program's kernels in forward order. With `fuse`, an anchor takes as epilogue an elementwise group that
    alone consumes its output, of that output's shape, else as prologue a group whose result only it reads."""
    consumers: dict[int, list[int]] = {}
    for k, n in enumerate(p.nodes):
        for t in n.inputs:
            consumers.setdefault(t, []).append(k)
    outputs = set(p.outputs)
    groups = fusion_groups(p)
    anchors = {g[-1]: Fragment(g[-1]) for g in groups if not is_elementwise(p.nodes[g[-1]].op)}
    loose = [g for g in groups if is_elementwise(p.nodes[g[-1]].op)]
    for g in list(loose) if fuse else []:
        sink = p.nodes[g[-1]].outputs[0]
        for t in dict.fromkeys(t for k in g for t in p.nodes[k].inputs):
            a = next((k for k in anchors if p.nodes[k].outputs[0] == t), None)
            if (
                a is not None
                and not anchors[a].epilogue
                and epilogue_ok(p.nodes[a])
                and t not in outputs
                and all(c in g for c in consumers[t])
                and p.tensors[t].shape == p.tensors[sink].shape
                and (p.nodes[a].op not in LAYOUT_OPS or p.tensors[t].dtype == p.tensors[sink].dtype)  # a copy's out
            ):
                anchors[a].epilogue = g
                loose.remove(g)
                break
    for g in list(loose) if fuse else []:
        sink = p.nodes[g[-1]].outputs[0]
        users = set(consumers.get(sink, []))
        a = next(iter(users)) if len(users) == 1 and sink not in outputs else None
        if a in anchors and p.nodes[a].op in PROLOGUE_OPS and not anchors[a].prologue:
            anchors[a].prologue = g
            loose.remove(g)
    frags = list(anchors.values()) + [Fragment(None, [], g) for g in loose]
    return sorted(frags, key=lambda f: f.position)


def _group_body(p: Program, group: list[int], names: dict[int, str], first: int):
    """(leaf tensors, the lines computing the group over v{first}.. and names given, its sink tensor)."""
    inside = {p.nodes[k].outputs[0] for k in group}
    leaves: list[int] = []
    for k in group:
        for t in p.nodes[k].inputs:
            if t not in inside and t not in leaves and t not in names:
                leaves.append(t)
    names = {**names, **{t: f"v{first + j}" for j, t in enumerate(leaves)}}
    body = []
    for k in group:
        n = p.nodes[k]
        out = n.outputs[0]
        names[out] = f"t{out}"
        body.append(f"t{out} = {expression(n.op, [names[t] for t in n.inputs], n.params)}")
    return leaves, body, p.nodes[group[-1]].outputs[0]


def short_runs(shape: tuple, leaf_shapes: list, dense: list[bool]) -> int:
    """The innermost coalesced dims a broadcast elementwise kernel's columns span (fused_kernel_source): two where
    the innermost is short (under 64) and another one is left, else one; from the shapes, leaves contiguous."""
    if all(dense):
        return 1
    strides = [torch.empty(s, device="meta").expand(shape).stride() for s, d in zip(leaf_shapes, dense) if not d]
    sizes, _ = wrappers.coalesced_dims(shape, strides)
    return 2 if 1 < sizes[3] < 64 and sizes[2] > 1 else 1


def fused_elementwise(p: Program, group: list[int], name: str, gpu: str | None = None) -> tuple[str, str]:
    """(kernel and wrapper source, forward line) for one elementwise group."""
    leaves, body, sink = _group_body(p, group, {}, 0)
    shape = tuple(p.tensors[sink].shape)
    dense = [tuple(p.tensors[t].shape) == shape for t in leaves]
    args = ", ".join(f"x{j}" for j in range(len(leaves)))
    config = config_for("elementwise", (p.tensors[sink].numel,), gpu)
    columns = short_runs(shape, [p.tensors[t].shape for t in leaves], dense)
    extra = (f", config={config!r}" if config else "") + (f", columns={columns}" if columns > 1 else "")
    # all inputs of the output's shape: the flat wrapper, which needs none of the broadcast tiles' helpers
    setup = f"flat_args({shape}, DTYPE, {args}{extra})"
    if not all(dense):
        setup = f"elementwise_args({shape}, DTYPE, {dense}, {args}{extra})"
    wrapper = "\n".join(
        [
            f"def {name}({args}):",
            f"    out, grid, kernel_args, meta = {setup}",
            f"    {name}_kernel[grid](*kernel_args, **meta)",
            "    return out",
            "",
        ]
    )
    line = f"tensor_{sink} = {name}({', '.join(f'tensor_{t}' for t in leaves)})"
    return fused_kernel_source(f"{name}_kernel", dense, body, f"t{sink}", columns) + "\n\n" + wrapper, line


def _describe(p: Program, nodes: list[int]) -> str:
    def one(n: Node) -> str:
        if n.op == "NormReduce":
            return f"{n.params['norm']} -> " + one(Node(n.params["op"], [], [], n.params))
        if n.op == "SoftmaxReduce":
            return f"{n.params['softmax']}(dim={n.params['sdim']}) -> " + one(Node(n.params["op"], [], [], n.params))
        shown = {k: v for k, v in n.params.items() if k in ("dim", "keepdim", "num_groups")}
        return n.op + ("(" + ", ".join(f"{k}={v}" for k, v in shown.items()) + ")" if shown else "")

    return ", ".join(one(p.nodes[k]) for k in nodes)


def _setup(node: Node, shape: tuple, x: list[str], w: list[str], out_shape: tuple, config: dict | None):
    """(library kernel, its fixed constexprs, the wrapper's setup call) of an anchor over a `shape` input named
    x[0], other tensor inputs x[1:], weights w."""
    small, config = split_small(config)
    p, cfg = node.params, f", config={config!r}" if config else ""
    if node.op in REDUCE_OPS:
        op = REDUCE_OPS[node.op]
        return "reduce_kernel", {"OP": op}, f"reduce_setup({shape}, {x[0]}, {p['dim']}, {p['keepdim']}, {op}{cfg})"
    if node.op in ALONG_OPS:
        loop = wrappers.long_column(*wrappers.split_at(shape, p["dim"])[1:])
        setup = f"along_setup({shape}, {x[0]}, {p['dim']}{cfg}{', loop=True' if loop else ''})"
        return ("along_loop_kernel" if loop else "along_dim_kernel"), {"OP": ALONG_OPS[node.op]}, setup
    if node.op == "SoftmaxReduce":  # its first kernel, softmax_stats_kernel, is the wrapper's (_softmax_stats)
        log, op = ALONG_OPS[p["softmax"]], REDUCE_OPS[p["op"]]
        mode = wrappers.softmax_stats_mode(shape, p["sdim"], p["dim"])
        setup = f"softmax_reduce_setup({shape}, {x[0]}, stats, {p['sdim']}, {p['dim']}, {p['keepdim']}, {op}{cfg})"
        return "softmax_reduce_kernel", {"OP": op, "LOG": log, "STATS": mode}, setup
    if node.op == "NormReduce":  # the kernel stores partial results, norm_reduce_finish makes the output
        mode, _, weight, bias = _norm(Node(p["norm"], [], []), w)
        fixed = {"MODE": mode, "OP": REDUCE_OPS[p["op"]], "HAS_B": bias is not None}
        return (
            "norm_reduce_kernel",
            fixed,
            f"norm_reduce_setup({shape}, {x[0]}, {weight}, {bias}, {mode}, {p['dim']}{cfg})",
        )
    if is_split_norm(node, shape):  # its first kernel, norm_stats_kernel, is the wrapper's (_statistics)
        mode, groups, weight, bias = _norm(node, w)
        fixed = {"MODE": mode, "HAS_W": weight is not None, "HAS_B": bias is not None}
        return "norm_apply_kernel", fixed, f"split_norm_setup({shape}, {x[0]}, {weight}, {bias}, {mode}, {groups}{cfg})"
    if is_persistent_norm(node, shape):
        mode, _, weight, bias = _norm(node, w)
        fixed = {"MODE": mode, "HAS_W": weight is not None, "HAS_B": bias is not None}
        setup = f"row_norm_persistent_setup({shape}, {x[0]}, {weight}, {bias}, {mode}{cfg})"
        return "row_norm_persistent_kernel", fixed, setup
    if node.op in NORM_MODES and node.op != "BatchNorm":
        mode, groups, weight, bias = _norm(node, w)
        fixed = {"MODE": mode, "HAS_W": weight is not None, "HAS_B": bias is not None}
        return "row_norm_kernel", fixed, f"row_norm_setup({shape}, {x[0]}, {weight}, {bias}, {mode}, {groups}{cfg})"
    if node.op == "BatchNorm":
        return "batch_norm_kernel", {}, f"batch_norm_setup({shape}, {x[0]}, {w[0]}, {w[1]}{cfg})"
    if node.op in ("Matmul", "Bmm"):
        return "matmul_kernel", {"HAS_BIAS": False}, f"matmul_setup({x[0]}, {x[1]}{cfg})"
    if node.op == "Linear":
        return "matmul_kernel", {"HAS_BIAS": True}, f"linear_setup({x[0]}, {w[0]}, {w[1]}{cfg})"
    if node.op.startswith("Conv"):
        t = node.op.startswith("ConvTranspose")
        name = "conv_small" if small else "conv"
        call = f"{name}_setup({x[0]}, {w[0]}, {w[1]}, {out_shape}, {p['stride']}, {p['padding']}, {p['dilation']}"
        return f"{name}_kernel", {"TRANSPOSED": t}, f"{call}, {p['groups']}, {t}{cfg})"
    if node.op in LAYOUT_OPS:
        return "transpose_tile_kernel", {}, f"permute_setup({x[0]}, {permutation(node, len(shape))}{cfg})"
    call = f"pool_setup({x[0]}, {out_shape}, {p['kernel']}, {p['stride']}, {p['padding']}{cfg})"
    return "pool_rows_kernel", {"IS_MAX": node.op.startswith("Max")}, call


def _statistics(
    name: str,
    base: str,
    fixed: dict,
    prologue: Side | None,
    x: str,
    comment: str,
    grid: str = "grid",
    meta: str = "meta",
) -> tuple[str, str]:
    """(kernel source, launch line) of the first kernel of a two-kernel anchor (a split norm's norm_stats_kernel, a
    softmax's softmax_stats_kernel before softmax_reduce_kernel), launched on `grid` with `meta` and the wrapper's
    stats_args: the library's kernel itself, or with a prologue its variant computing the prologue on the values it
    loads, as the second kernel does."""
    if not prologue:
        consts = "".join(f"{c}={v}, " for c, v in fixed.items())
        return "", f"    {base}[{grid}]({x}, *stats_args, {consts}**{meta})"
    kernel, still = fused_anchor_source(
        base, f"{name}_stats_kernel", fixed, prologue, None, f"statistics of: {comment}"
    )
    launch = ["*pro", "*stats_args"] + (["*pro_index"] if not all(prologue.dense) else [])
    launch += [f"{c}={fixed[c]}" for c in still] + [f"**{meta}"]  # MODE or LOG, if its branches are still there
    return kernel + "\n\n", f"    {name}_stats_kernel[{grid}]({', '.join(launch)})"


def _softmax_stats(name: str, node: Node, shape: tuple, x: str, prologue: Side | None, comment: str):
    """(kernel source, wrapper lines) of a SoftmaxReduce's first kernel, softmax_stats_kernel (or its variant with the
    prologue): the softmax's statistics, which the wrapper's softmax_reduce_setup then takes."""
    fixed = {"LOG": ALONG_OPS[node.params["softmax"]]}
    kernel, line = _statistics(name, "softmax_stats_kernel", fixed, prologue, x, comment, "stats_grid", "stats_meta")
    sdim = node.params["sdim"]
    lines = [f"    stats, stats_grid, stats_args, stats_meta = softmax_stats_setup({shape}, {x}, {sdim})"]
    if prologue and not all(prologue.dense):  # an index of the kernel may be int32
        lines.append("    stats_meta = leaf_wide(stats_meta, *pro)")
    return kernel, lines + [line]


def _anchor_fragment(p: Program, f: Fragment, name: str, gpu: str | None) -> tuple[str, str]:
    """(kernel and wrapper source, forward line) of an anchor with a prologue and/or an epilogue."""
    node = p.nodes[f.anchor]
    anchor_out = node.outputs[0]
    args: list[str] = []  # the wrapper's arguments, as the forward passes them

    def param(expr: str) -> str:
        args.append(expr)
        return f"x{len(args) - 1}"

    shape = tuple(p.tensors[node.inputs[0]].shape)
    prologue = epilogue = None
    lines = []
    if f.prologue:
        leaves, body, sink = _group_body(p, f.prologue, {}, 0)
        dense = [tuple(p.tensors[t].shape) == shape for t in leaves]
        prologue = Side(list(range(len(leaves))), dense, body, f"t{sink}")
        names = [param(f"tensor_{t}") for t in leaves]
        index = "pro_index" if not all(dense) else "_"
        lines.append(f"    pro, {index} = leaf_args({shape}, {dense}, {', '.join(names)})")
        x = [names[0]] + [param(f"tensor_{t}") for t in node.inputs[1:]]
    else:
        x = [param(f"tensor_{t}") for t in node.inputs]
    w = [param(f"self.weight_{t}") for t in node.weights]
    out_shape = tuple(p.tensors[anchor_out].shape)
    shapes = [p.tensors[t].shape for t in node.inputs + node.weights]
    dims = kernel_dims(node.op, node.params, shapes, out_shape)
    config = resolved(node.op, node.params, shapes, out_shape, config_for(*dims, gpu) if dims else None)
    base, fixed, setup = _setup(node, shape, x, w, out_shape, config)
    split = base == "norm_apply_kernel"
    comment = " -> ".join(
        part for part in (_describe(p, f.prologue), _describe(p, [f.anchor]), _describe(p, f.epilogue)) if part
    )
    stats_src = ""  # a two-kernel anchor's first kernel
    if base == "softmax_reduce_kernel":
        stats_src, more = _softmax_stats(name, node, shape, x[0], prologue, comment)
        lines += more
    lines.append(f"    out, grid, {'stats_args, ' if split else ''}args, meta = {setup}")
    final = anchor_out
    if f.epilogue:
        first = len(prologue.leaves) if prologue else 0
        leaves, body, final = _group_body(p, f.epilogue, {anchor_out: "val"}, first)
        dense = [tuple(p.tensors[t].shape) == out_shape for t in leaves]
        epilogue = Side(list(range(first, first + len(leaves))), dense, body, f"t{final}")
        if leaves:
            names = [param(f"tensor_{t}") for t in leaves]
            index = "epi_index" if not all(dense) else "_"
            lines.append(f"    epi, {index} = leaf_args(out.shape, {dense}, {', '.join(names)})")
    broadcast = [f"*{s}" for s, side in (("pro", prologue), ("epi", epilogue)) if side and not all(side.dense)]
    if broadcast and "WIDE" in getattr(kernels, base).arg_names:  # an index of this kernel may be int32
        lines.append(f"    meta = leaf_wide(meta, {', '.join(broadcast)})")
    kernel, still = fused_anchor_source(base, f"{name}_kernel", fixed, prologue, epilogue, f"fused: {comment}")
    launch = ["*pro" if prologue else x[0], "*args"]
    launch += ["*epi"] if epilogue and epilogue.leaves else []
    launch += ["*pro_index"] if prologue and not all(prologue.dense) else []
    launch += ["*epi_index"] if epilogue and not all(epilogue.dense) else []
    launch += [f"{c}={fixed[c]}" for c in still] + ["**meta"]
    if split:
        stats_src, line = _statistics(name, "norm_stats_kernel", {"MODE": fixed["MODE"]}, prologue, x[0], comment)
        lines.append(line)
    kernel = stats_src + kernel
    lines.append(f"    {name}_kernel[grid]({', '.join(launch)})")
    if base == "norm_reduce_kernel":
        p_ = node.params
        lines.append(f"    out = norm_reduce_finish(out, {shape}, {x[0]}, {p_['dim']}, {p_['keepdim']}, {fixed['OP']})")
    lines += ["    return out", ""]
    wrapper = f"def {name}({', '.join(f'x{j}' for j in range(len(args)))}):\n" + "\n".join(lines)
    return kernel + "\n\n" + wrapper, f"tensor_{final} = {name}({', '.join(args)})"


def _first_sentence(text: str) -> str:
    """Up to the first full stop outside brackets and backticks, whitespace collapsed."""
    text, depth, quoted = " ".join(text.split()), 0, False
    for i, ch in enumerate(text):
        quoted ^= ch == "`"
        depth += (ch in "([{") - (ch in ")]}")
        if ch == "." and not depth and not quoted and (i + 1 == len(text) or text[i + 1] == " "):
            return text[: i + 1]
    return text


def _short_docstring(lines: list[str], f: ast.FunctionDef) -> list[str]:
    """f's lines with its docstring cut to its first sentence. A generated solution is training data: the library's
    explanations (why a tile, what a GPU measured) made most answers longer than the policy's context (level-1
    answers' median 2,155 SmolLM2 tokens, 96 of 100 past 1,792), and a reader of one solution needs what each
    helper does, not why."""
    doc = f.body[0] if f.body else None
    if not (isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant) and isinstance(doc.value.value, str)):
        return lines
    raw = "\n".join(lines[doc.lineno - 1 : doc.end_lineno]).strip()
    quote = raw[:3] if raw[:3] in ('"""', "'''") else raw[0]
    indent = " " * doc.col_offset
    short = textwrap.wrap(quote + _first_sentence(raw[len(quote) : -len(quote)]) + quote, 116 - len(indent))
    return lines[: doc.lineno - 1] + [indent + line for line in short] + lines[doc.end_lineno :]


def _definitions(module) -> dict[str, tuple[str, set[str]]]:
    """A module's top-level functions: name -> (source with decorators, its docstring cut to the first sentence;
    names it uses)."""
    source = inspect.getsource(module)
    lines = source.splitlines()
    out = {}
    for f in ast.parse(source).body:
        if isinstance(f, ast.FunctionDef):
            start = min([f.lineno] + [d.lineno for d in f.decorator_list])
            used = {n.id for n in ast.walk(f) if isinstance(n, ast.Name)}
            text = _short_docstring(lines[: f.end_lineno], f)[start - 1 :]
            out[f.name] = ("\n".join(text) + "\n", used)
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


def fold_layouts(p: Program) -> Program:
    """The program with each reduction over a transpose or permutation (of x, read by nothing else) done on x in its
    own layout: reduce(x.permute(P), d) is reduce(x, P[d], keepdim=True).permute(P), squeezed where the reduction
    drops its dim, so the permutation copies the reduced tensor (or is a view) and x is read once, coalesced, not
    copied and read again."""
    readers: dict[int, int] = {}
    for n in p.nodes:
        for t in n.inputs:
            readers[t] = readers.get(t, 0) + 1
    layout = {n.outputs[0]: n for n in p.nodes if n.op in LAYOUT_OPS}
    folded = {
        n.inputs[0]
        for n in p.nodes
        if n.op in REDUCE_OPS and n.inputs[0] in layout and readers[n.inputs[0]] == 1 and n.inputs[0] not in p.outputs
    }
    nodes, tensors, fresh = [], dict(p.tensors), max(p.tensors) + 1
    for n in p.nodes:
        if n.outputs[0] in folded:  # the layout operator: its reader reduces its input instead
            continue
        if n.op not in REDUCE_OPS or n.inputs[0] not in folded:
            nodes.append(n)
            continue
        src = layout[n.inputs[0]]
        x, out = tensors[src.inputs[0]], tensors[n.outputs[0]]
        perm = list(permutation(src, len(x.shape)))
        dim = perm[n.params["dim"] % len(x.shape)]
        kept = [1 if k == dim else size for k, size in enumerate(x.shape)]
        tensors[fresh] = Tensor(fresh, kept, out.dtype, "intermediate")
        nodes.append(Node(n.op, [x.id], [fresh], {**n.params, "dim": dim, "keepdim": True}))
        if n.params["keepdim"]:
            nodes.append(Node("Permute", [fresh], [out.id], {"dims": perm}))
        else:
            tensors[fresh + 1] = Tensor(fresh + 1, [kept[d] for d in perm], out.dtype, "intermediate")
            nodes.append(Node("Permute", [fresh], [fresh + 1], {"dims": perm}))
            nodes.append(Node("View", [fresh + 1], [out.id], {"shape": list(out.shape)}))
        fresh += 2
    used = {t for n in nodes for t in n.inputs + n.outputs + n.weights}
    tensors = {k: t for k, t in tensors.items() if k in used or t.role != "intermediate"}
    return Program(nodes, tensors, p.dtype, p.flops)


def _fold_into_reader(p: Program, fold) -> Program:
    """The program with each node whose output only one node reads (and is not a program output) merged with that
    reader where `fold(node, reader)` gives the node replacing both; the node's output is gone."""
    readers: dict[int, list[int]] = {}
    for k, n in enumerate(p.nodes):
        for t in n.inputs:
            readers.setdefault(t, []).append(k)
    folded: dict[int, Node] = {}  # reader's index -> the node replacing it and the node it reads
    dropped, gone = set(), set()
    for n in p.nodes:
        users = readers.get(n.outputs[0], [])
        if len(users) != 1 or n.outputs[0] in p.outputs:
            continue
        merged = fold(n, p.nodes[users[0]])
        if merged is not None:
            folded[users[0]] = merged
            dropped.add(id(n))
            gone.add(n.outputs[0])
    if not folded:
        return p
    nodes = [folded.get(k, n) for k, n in enumerate(p.nodes) if id(n) not in dropped]
    tensors = {t: v for t, v in p.tensors.items() if t not in gone}
    return Program(nodes, tensors, p.dtype, p.flops)


def fold_norm_reduce(p: Program) -> Program:
    """The program with each layer or RMS norm read only by a reduction over an outer dim (one that is not
    normalised) as one NormReduce node: norm_reduce_kernel normalises each row where it loads it and reduces across
    rows, so x is read once and the normalised tensor, as large as x, is neither written nor read back. Rows of up to
    8192 values (one tile each, wrappers.norm_reduce_rows); sums, means, extrema and L2 norms."""

    def fold(n: Node, r: Node):
        if n.op not in ("LayerNorm", "RMSNorm") or r.op not in ("Sum", "Mean", "Max", "Min", "Norm"):
            return None
        shape, k = p.tensors[n.inputs[0]].shape, n.params.get("k", 1)
        if (
            r.params["dim"] % len(shape) < len(shape) - k
            and len(n.weights) == (2 if n.op == "LayerNorm" else 1)
            and wrappers.norm_reduce_rows(math.prod(shape[len(shape) - k :]))
        ):
            params = {"norm": n.op, "op": r.op, "dim": r.params["dim"], "keepdim": r.params["keepdim"]}
            return Node("NormReduce", list(n.inputs), list(r.outputs), params, list(n.weights))
        return None

    return _fold_into_reader(p, fold)


def fold_softmax_reduce(p: Program) -> Program:
    """The program with each softmax or log-softmax read only by a reduction (over any dim: its own or another) as one
    SoftmaxReduce node: softmax_stats_kernel writes each softmax column's maximum and sum in one pass over x, and
    softmax_reduce_kernel recomputes the softmax from x and them where it loads x, so the softmax's output, as large
    as x, is neither written nor read back: x is read twice, where the softmax read it once or twice (a long column)
    and wrote its output, which the reduction read back."""

    def fold(n: Node, r: Node):
        if n.op not in ("Softmax", "LogSoftmax") or r.op not in REDUCE_OPS:
            return None
        # an arg reduction of a half-precision softmax compares the rounded values (their ties): not recomputed
        if r.op in ("ArgMax", "ArgMin") and p.tensors[n.outputs[0]].dtype != "float32":
            return None
        params = {"softmax": n.op, "sdim": n.params["dim"], "op": r.op, **r.params}
        return Node("SoftmaxReduce", list(n.inputs), list(r.outputs), params)

    return _fold_into_reader(p, fold)


def lower_program(p: Program, problem_source: str, fuse: bool = True, gpu: str | None = "auto") -> str:
    """The full candidate module for program p, whose problem text is `problem_source`. `fuse=False`: one kernel per
    operator but elementwise groups (the lowering before whole-fragment fusion); `gpu`: the GPU whose tuned launch
    configurations to bake in ("auto": this host's, see lower/tuning.py; None: the wrappers' own choices). The
    library code it carries is specialized to the constants the program passes it (lower/specialize.py)."""
    gpu = gpu_name() if gpu == "auto" else gpu
    p = fold_softmax_reduce(fold_norm_reduce(fold_layouts(p))) if fuse else p
    kernels_src: list[str] = []
    forward: list[str] = []
    views = view_layouts(p)
    for g, f in enumerate(fragments(p, fuse)):
        if f.anchor in views and not f.epilogue:  # only size-1 dims move: no copy
            node = p.nodes[f.anchor]
            out_shape = tuple(p.tensors[node.outputs[0]].shape)
            src, line = None, f"tensor_{node.outputs[0]} = reshape_view(tensor_{node.inputs[0]}, {out_shape})"
        elif f.anchor is None:
            src, line = fused_elementwise(p, f.epilogue, f"fused_{g}", gpu)
        elif f.prologue or f.epilogue:
            src, line = _anchor_fragment(p, f, f"fused_{g}", gpu)
        else:
            node = p.nodes[f.anchor]
            out_shape = p.tensors[node.outputs[0]].shape
            shapes = [p.tensors[t].shape for t in node.inputs + node.weights]
            dims = kernel_dims(node.op, node.params, shapes, out_shape)
            config = resolved(node.op, node.params, shapes, out_shape, config_for(*dims, gpu) if dims else None)
            in_shape = p.tensors[node.inputs[0]].shape
            line = f"tensor_{node.outputs[0]} = {launch_call(node, in_shape, out_shape, config)}"
            src = None
        kernels_src += [src] if src else []
        forward.append(line)
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
    return specialize("\n".join(body))  # the library's branches this program never takes go (lower/specialize.py)


def lower_source(problem_source: str) -> str:
    """Lower a problem given as KernelBench source (see lower/parse.py for what it accepts)."""
    from drtriton_ray.lower.parse import program_from_source

    return lower_program(program_from_source(problem_source), problem_source)
