"""Code generation: a program (its DAG) to a standalone KernelBench solution, `class ModelNew` whose forward launches
Triton kernels only.

The program is first rewritten where one kernel can do two nodes' work (lower/passes.py) and cut into kernels
(lower/grouping.py). Each kernel's code comes from its anchor's registration (lower/lowerings.py): an operator alone
is a call of its library wrapper, an anchor with fused elementwise groups one generated kernel (its library kernel
specialized and fused by lower/fuse.py) and wrapper, an elementwise group a generated kernel of its expressions
(lower/elementwise.py). The kernels and wrappers the forward needs are copied in (lower/library.py), so the emitted
module needs nothing but torch and triton. Launch configurations tuned per GPU and shape (lower/tuning.py) are baked
in as literals.
"""

from __future__ import annotations

import ast
import math
from dataclasses import replace

import torch

from drtriton_ray.ir import Node, Program, Tensor
from drtriton_ray.ir.render import FLOAT_PREFIXES, forward_signature
from drtriton_ray.lower import kernels, wrappers
from drtriton_ray.lower.elementwise import expression, fused_kernel_source
from drtriton_ray.lower.fuse import Side, fused_anchor_source
from drtriton_ray.lower.grouping import (
    KernelGroup,
    input_views,
    kernel_groups,
    prologue_like,
    slice_views,
    view_layouts,
)
from drtriton_ray.lower.library import library_source
from drtriton_ray.lower.lowerings import LOWERINGS, AnchorKernel, Lowering, Site, StatsKernel, describe
from drtriton_ray.lower.passes import fold_all, one_pass_norms, unsplit_norms
from drtriton_ray.lower.specialize import specialize
from drtriton_ray.lower.symbolic import binding_lines, pass_sizes, used_sizes, with_sizes
from drtriton_ray.lower.tuning import config_for, gpu_name, kernel_dims, key_dtype, resolved

HEADER = "import torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n"


class NotLowerable(Exception):
    """The lowering has no kernel for this operator yet."""


def lowering_of(op: str) -> Lowering:
    """An operator's registration (lower/lowerings.py)."""
    if op not in LOWERINGS:
        raise NotLowerable(f"no Triton lowering for {op} yet")
    return LOWERINGS[op]


def split_small(config: dict | None) -> tuple[bool, dict | None]:
    """(whether a conv launches conv_small_kernel, the config for its wrapper): the emitter's choice, not a launch
    constant."""
    rest = {k: v for k, v in (config or {}).items() if k != "SMALL"}
    return bool((config or {}).get("SMALL")), rest or None


def weight_name(p: Program, t: int) -> str:
    """A tensor a kernel reads as the forward names it: a parameter (in a weight slot, or an operand, as Hugging Face's
    `weight * x`), or tensor_k (a folded RMS norm's weight that the program computes or takes as an input)."""
    return f"self.weight_{t}" if p.tensors[t].role == "weight" else f"tensor_{t}"


def launch_call(
    node: Node, in_shape: list[int], out_shape: list[int], config: dict | None = None, w: list[str] | None = None
) -> str:
    """The forward line's right-hand side for a non-elementwise node (a tuned launch config as a last argument; a
    conv's "SMALL", see tuning.resolved, picks its wrapper and is not passed on); `w`: its weights' names (default:
    parameters)."""
    small, config = split_small(config)
    lowering = lowering_of(node.op)
    x, w = [f"tensor_{i}" for i in node.inputs], w or [f"self.weight_{i}" for i in node.weights]
    call = lowering.call(Site(node, x, w, tuple(in_shape), tuple(out_shape), small=small))
    if not config or not lowering.takes_config:
        return call
    return f"{call[:-1]}, config={config!r})"  # by keyword: a norm's eps may come before it


def launch_config(p: Program, node: Node, gpu: str | None) -> dict | None:
    """A node's launch configuration: tuned for `gpu` (lower/tuning.py), resolved as the emitter decides."""
    shapes = [p.tensors[t].shape for t in node.inputs + node.weights]
    out_shape = p.tensors[node.outputs[0]].shape
    dims = kernel_dims(node.op, node.params, shapes, out_shape)
    config = config_for(*dims, gpu, key_dtype(p, node)) if dims else None
    return resolved(node.op, node.params, shapes, out_shape, config)


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
        dtypes = [p.tensors[t].dtype for t in n.inputs]
        body.append(f"t{out} = {expression(n.op, [names[t] for t in n.inputs], n.params, dtypes)}")
    return leaves, body, p.nodes[group[-1]].outputs[0]


def short_runs(shape: tuple, leaf_shapes: list, dense: list[bool], metas: list | None = None) -> int:
    """The innermost coalesced dims a broadcast elementwise kernel's columns span (fused_kernel_source): two where
    the innermost is short (under 64) and another one is left, else one; from the shapes, leaves contiguous, or
    from `metas`, meta tensors of the leaves as the kernel gets them (slice views, leaf_meta)."""
    if all(dense):
        return 1
    metas = metas or [torch.empty(s, device="meta") for s in leaf_shapes]
    strides = [m.expand(shape).stride() for m, d in zip(metas, dense) if not d]
    sizes, _ = wrappers.coalesced_dims(shape, strides)
    return 2 if 1 < sizes[3] < 64 and sizes[2] > 1 else 1


# a slice's tensor method and its arguments, in order: a Narrow or Select is x.narrow(...) / x.select(...)
SLICE_ARGS = {"Narrow": ("dim", "start", "length"), "Select": ("dim", "index")}


def slice_args(node: Node) -> tuple[str, list]:
    return node.op.lower(), [node.params[k] for k in SLICE_ARGS[node.op]]


def slice_view(node: Node) -> str:
    """A Narrow or Select of tensor_k as the view the forward takes (no kernel, grouping.slice_views)."""
    method, args = slice_args(node)
    return f"tensor_{node.inputs[0]}.{method}({', '.join(map(str, args))})"


def leaf_meta(p: Program, t: int, views: dict[int, Node]) -> torch.Tensor:
    """A meta tensor of leaf t as a kernel gets it: contiguous, or a slice view (`views`, by result) of one."""
    node = views.get(t)
    if node is None:
        return torch.empty(p.tensors[t].shape, device="meta")
    method, args = slice_args(node)
    return getattr(leaf_meta(p, node.inputs[0], views), method)(*args)


def dense_leaves(p: Program, leaves: list[int], shape: tuple, views: dict[int, Node]) -> list[bool]:
    """Which leaves a fused kernel reads at its flat index: those of its shape, contiguous. A slice view is read
    through its strides whatever its layout: one that is contiguous at these sizes need not be at others."""
    return [tuple(p.tensors[t].shape) == shape and t not in views for t in leaves]


def fused_elementwise(
    p: Program, group: list[int], name: str, gpu: str | None = None, views: dict[int, Node] | None = None
) -> tuple[str, str]:
    """(kernel and wrapper source, forward line) for one elementwise group; `views`: the slice views among the
    tensors it may read, by result (grouping.slice_views)."""
    views = views or {}
    leaves, body, sink = _group_body(p, group, {}, 0)
    shape = tuple(p.tensors[sink].shape)
    dense = dense_leaves(p, leaves, shape, views)
    args = ", ".join(f"x{j}" for j in range(len(leaves)))
    config = config_for("elementwise", (p.tensors[sink].numel,), gpu, p.tensors[sink].dtype)
    metas = [leaf_meta(p, t, views) for t in leaves]
    columns = short_runs(shape, [p.tensors[t].shape for t in leaves], dense, metas)
    extra = (f", config={config!r}" if config else "") + (f", columns={columns}" if columns > 1 else "")
    # the output in its own dtype: the program's, or another after a Cast
    dtype = "DTYPE" if p.tensors[sink].dtype == p.dtype else f"torch.{p.tensors[sink].dtype}"
    # all inputs of the output's shape: the flat wrapper, which needs none of the broadcast tiles' helpers
    setup = f"flat_args({shape}, {dtype}, {args}{extra})"
    if not all(dense):
        setup = f"elementwise_args({shape}, {dtype}, {dense}, {args}{extra})"
    wrapper = "\n".join(
        [
            f"def {name}({args}):",
            f"    out, grid, kernel_args, meta = {setup}",
            f"    {name}_kernel[grid](*kernel_args, **meta)",
            "    return out",
            "",
        ]
    )
    line = f"tensor_{sink} = {name}({', '.join(weight_name(p, t) for t in leaves)})"
    runtime_n = all(dense) and varies_by_16(p.tensors[sink])
    return fused_kernel_source(f"{name}_kernel", dense, body, f"t{sink}", columns, runtime_n) + "\n\n" + wrapper, line


def varies_by_16(t: Tensor) -> bool:
    """Whether t's element count depends on the program's sizes (a symbolic dim) and is a multiple of 16 at any of
    them (its fixed dims' product is): its kernel can take the count as an argument (elementwise.py)."""
    fixed = math.prod(d for d, s in zip(t.shape, t.sym or [""] * len(t.shape)) if not s)
    return any(t.sym) and fixed % 16 == 0


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
    prologue = replace(prologue, kept=None)  # the second kernel stores it
    kernel, still = fused_anchor_source(
        base, f"{name}_stats_kernel", fixed, prologue, None, f"statistics of: {comment}"
    )
    launch = ["*pro", "*stats_args"] + (["*pro_index"] if not all(prologue.dense) else [])
    launch += [f"{c}={fixed[c]}" for c in still] + [f"**{meta}"]  # MODE or LOG, if its branches are still there
    return kernel + "\n\n", f"    {name}_stats_kernel[{grid}]({', '.join(launch)})"


def _own_stats(name: str, stats: StatsKernel, prologue: Side | None, x: str, comment: str) -> tuple[str, list[str]]:
    """(kernel source, wrapper lines) of a statistics kernel with its own setup (a SoftmaxReduce's
    softmax_stats_kernel, or its variant with the prologue), whose stats the anchor's setup then takes."""
    kernel, line = _statistics(name, stats.kernel, stats.fixed, prologue, x, comment, "stats_grid", "stats_meta")
    lines = [f"    stats, stats_grid, stats_args, stats_meta = {stats.setup}"]
    if prologue and not all(prologue.dense):  # an index of the kernel may be int32
        lines.append("    stats_meta = leaf_wide(stats_meta, *pro)")
    return kernel, lines + [line]


class _Wrapper:
    """A fused kernel's wrapper as it is written: its arguments (as the forward passes them) and body lines."""

    def __init__(self):
        self.args: list[str] = []
        self.lines: list[str] = []

    def param(self, expr: str) -> str:
        self.args.append(expr)
        return f"x{len(self.args) - 1}"


def _prologue(p: Program, f: KernelGroup, node: Node, shape: tuple, wrapper: _Wrapper, views: dict[int, Node]):
    """(the prologue's Side or None, the anchor's tensor inputs as the wrapper names them). A kept group's output
    is allocated here as `kept`."""
    if not f.prologue:
        return None, [wrapper.param(weight_name(p, t)) for t in node.inputs]
    leaves, body, sink = _group_body(p, f.prologue, {}, 0)
    dense = dense_leaves(p, leaves, shape, views)
    names = [wrapper.param(weight_name(p, t)) for t in leaves]
    index = "pro_index" if not all(dense) else "_"
    wrapper.lines.append(f"    pro, {index} = leaf_args({shape}, {dense}, {', '.join(names)})")
    like = prologue_like(p, f.prologue)  # the output's dtype: not a mask's (none: _dtype_of gives it)
    x = [names[leaves.index(like) if like is not None else 0]] + [
        wrapper.param(weight_name(p, t)) for t in node.inputs[1:]
    ]
    side = Side(list(range(len(leaves))), dense, body, f"t{sink}")
    if f.kept_out is not None:  # the prologue's result, or a group of it alone (grouping._kept)
        kept_body = _group_body(p, f.kept, {sink: f"t{sink}"}, len(leaves))[1] if f.kept else []
        side.kept = (kept_body, f"t{f.kept_out}")
        dtype = p.tensors[f.kept_out].dtype
        wrapper.lines.append(f"    kept = torch.empty({shape}, device={names[0]}.device, dtype=torch.{dtype})")
    return side, x


def _epilogue(p: Program, f: KernelGroup, anchor_out: int, first: int, wrapper: _Wrapper, views: dict[int, Node]):
    """(the epilogue's Side or None, the tensor the kernel stores)."""
    if not f.epilogue:
        return None, anchor_out
    leaves, body, final = _group_body(p, f.epilogue, {anchor_out: "val"}, first)
    out_shape = tuple(p.tensors[anchor_out].shape)
    dense = dense_leaves(p, leaves, out_shape, views)
    if leaves:
        names = [wrapper.param(weight_name(p, t)) for t in leaves]
        index = "epi_index" if not all(dense) else "_"
        wrapper.lines.append(f"    epi, {index} = leaf_args(out.shape, {dense}, {', '.join(names)})")
    return Side(list(range(first, first + len(leaves))), dense, body, f"t{final}"), final


def _launch(name: str, x0: str, ak: AnchorKernel, still: list[str], prologue, epilogue) -> str:
    """The fused kernel's launch line."""
    launch = ["*pro" if prologue else x0] + (["kept"] if prologue and prologue.kept else []) + ["*args"]
    launch += ["*epi"] if epilogue and epilogue.leaves else []
    launch += ["*pro_index"] if prologue and not all(prologue.dense) else []
    launch += ["*epi_index"] if epilogue and not all(epilogue.dense) else []
    launch += [f"{c}={ak.fixed[c]}" for c in still] + ["**meta"]
    return f"    {name}_kernel[grid]({', '.join(launch)})"


def _dtype_of(p: Program, f: KernelGroup, x0: str, wrapper: _Wrapper) -> str:
    """ "" where the anchor's kernel stores the dtype of the tensor its setup allocates like (its input, a prologue's
    leaf), else the name of an empty tensor of the dtype it stores, made in the wrapper (a fused group converts)."""
    node = p.nodes[f.anchor]
    final = p.tensors[p.nodes[f.epilogue[-1]].outputs[0] if f.epilogue else node.outputs[0]]
    like = node.inputs[0]
    if f.prologue:  # the leaf _prologue names x0
        inside = {p.nodes[k].outputs[0] for k in f.prologue}
        leaves = [t for k in f.prologue for t in p.nodes[k].inputs if t not in inside]
        like = prologue_like(p, f.prologue)
        like = leaves[0] if like is None else like
    if not final.dtype.startswith(FLOAT_PREFIXES) or p.tensors[like].dtype == final.dtype:
        return ""
    wrapper.lines.append(f"    like = torch.empty(0, device={x0}.device, dtype=torch.{final.dtype})")
    return "like"


def _own_eps(p: Program, node: Node) -> Node:
    """The node with an RMS norm's default epsilon (its input dtype's machine epsilon) as a param: the setup would
    take the dtype it allocates like's."""
    if "RMSNorm" not in (node.op, node.params.get("norm")) or node.params.get("eps") is not None:
        return node
    eps = torch.finfo(getattr(torch, p.tensors[node.inputs[0]].dtype)).eps
    return Node(node.op, node.inputs, node.outputs, {**node.params, "eps": eps}, node.weights)


def _anchor_kernel(p: Program, f: KernelGroup, name: str, gpu: str | None, views: dict[int, Node]) -> tuple[str, str]:
    """(kernel and wrapper source, forward line) of an anchor with a prologue and/or an epilogue; `views`: the slice
    views its sides may read, by result."""
    node = p.nodes[f.anchor]
    anchor_out, wrapper = node.outputs[0], _Wrapper()
    shape = tuple(p.tensors[node.inputs[0]].shape)
    prologue, x = _prologue(p, f, node, shape, wrapper, views)
    w = [wrapper.param(weight_name(p, t)) for t in node.weights]
    small, config = split_small(launch_config(p, node, gpu))
    dtype_of = _dtype_of(p, f, x[0], wrapper)
    site_node = _own_eps(p, node) if dtype_of else node
    site = Site(site_node, x, w, shape, tuple(p.tensors[anchor_out].shape), config, small, dtype_of)
    ak = lowering_of(node.op).kernel(site)
    shared = ak.stats is not None and ak.stats.setup is None  # the statistics' kernel takes the setup's stats_args
    comment = " -> ".join(
        part for part in (_describe(p, f.prologue), _describe(p, [f.anchor]), _describe(p, f.epilogue)) if part
    )
    stats_src = ""  # a two-kernel anchor's first kernel
    if ak.stats and ak.stats.setup:
        stats_src, more = _own_stats(name, ak.stats, prologue, x[0], comment)
        wrapper.lines += more
    wrapper.lines.append(f"    out, grid, {'stats_args, ' if shared else ''}args, meta = {ak.setup}")
    epilogue, final = _epilogue(p, f, anchor_out, len(prologue.leaves) if prologue else 0, wrapper, views)
    broadcast = [f"*{s}" for s, side in (("pro", prologue), ("epi", epilogue)) if side and not all(side.dense)]
    if broadcast and "WIDE" in getattr(kernels, ak.kernel).arg_names:  # an index of this kernel may be int32
        wrapper.lines.append(f"    meta = leaf_wide(meta, {', '.join(broadcast)})")
    kernel, still = fused_anchor_source(ak.kernel, f"{name}_kernel", ak.fixed, prologue, epilogue, f"fused: {comment}")
    if shared:
        stats_src, line = _statistics(name, ak.stats.kernel, ak.stats.fixed, prologue, x[0], comment)
        wrapper.lines.append(line)
    wrapper.lines.append(_launch(name, x[0], ak, still, prologue, epilogue))
    wrapper.lines += [f"    {ak.finish}"] if ak.finish else []
    wrapper.lines += ["    return out" if f.kept_out is None else "    return out, kept", ""]
    source = f"def {name}({', '.join(f'x{j}' for j in range(len(wrapper.args)))}):\n" + "\n".join(wrapper.lines)
    outs = f"tensor_{final}" + ("" if f.kept_out is None else f", tensor_{f.kept_out}")
    return stats_src + kernel + "\n\n" + source, f"{outs} = {name}({', '.join(wrapper.args)})"


def _describe(p: Program, nodes: list[int]) -> str:
    return ", ".join(describe(p.nodes[k]) for k in nodes)


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


def _kernel(
    p: Program, f: KernelGroup, g: int, views: set[int], slices: dict[int, Node], gpu: str | None
) -> tuple[str | None, str]:
    """(generated kernel and wrapper source or None, forward line) of kernel group f, the g-th; `views`: the layout
    nodes emitted as views, `slices` the slice views by result."""
    if f.anchor in views and not f.epilogue:  # only size-1 dims move: no copy
        node = p.nodes[f.anchor]
        out_shape = tuple(p.tensors[node.outputs[0]].shape)
        return None, f"tensor_{node.outputs[0]} = reshape_view(tensor_{node.inputs[0]}, {out_shape})"
    if f.anchor is not None and slices.get(p.nodes[f.anchor].outputs[0]) is p.nodes[f.anchor]:
        return None, f"tensor_{p.nodes[f.anchor].outputs[0]} = {slice_view(p.nodes[f.anchor])}"
    if f.anchor is None:
        return fused_elementwise(p, f.epilogue, f"fused_{g}", gpu, slices)
    if f.prologue or f.epilogue:
        return _anchor_kernel(p, f, f"fused_{g}", gpu, slices)
    node = p.nodes[f.anchor]
    lowering_of(node.op)  # a PyTorch node (one with no tensor input too) gets the clear error first
    out_shape = p.tensors[node.outputs[0]].shape
    in_shape = p.tensors[node.inputs[0]].shape
    call = launch_call(
        node, in_shape, out_shape, launch_config(p, node, gpu), [weight_name(p, t) for t in node.weights]
    )
    if node.outputs[0] in p.outputs and node.outputs[0] in input_views(p):  # a View of an input, returned
        call = f"contiguous_copy({call})"
    return None, f"tensor_{node.outputs[0]} = {call}"


def lower_program(
    p: Program,
    problem_source: str,
    fuse: bool = True,
    gpu: str | None = "auto",
    one_pass: bool = False,
    unsplit: bool = False,
) -> str:
    """The full candidate module for program p, whose problem text is `problem_source`. `fuse=False`: one kernel per
    operator but elementwise groups (the lowering before whole-fragment fusion); `gpu`: the GPU whose tuned launch
    configurations to bake in ("auto": this host's, see lower/tuning.py; None: the wrappers' own choices);
    `one_pass`: norms of rows up to 4,096 values read each row once (lower/passes.py one_pass_norms); `unsplit`:
    norms of long rows a program per row where they are split by default (lower/passes.py unsplit_norms). The library
    code it carries is specialized to the constants the program passes it (lower/specialize.py)."""
    gpu = gpu_name() if gpu == "auto" else gpu
    p = with_sizes(p)  # symbolic dims read from the inputs at run time (lower/symbolic.py)
    p = fold_all(p) if fuse else p
    p = one_pass_norms(p) if one_pass else p
    p = unsplit_norms(p) if unsplit else p
    kernels_src: list[str] = []
    forward: list[str] = []
    views, slices = view_layouts(p), slice_views(p)
    for g, f in enumerate(kernel_groups(p, fuse)):
        src, line = _kernel(p, f, g, views, slices, gpu)
        if src:
            src, line = pass_sizes(src, line, f"fused_{g}", used_sizes(p, src))
        kernels_src += [src] if src else []
        forward.append(line)
    outs = [f"tensor_{o}" for o in p.outputs]
    forward.append("return " + (outs[0] if len(outs) == 1 else "(" + ", ".join(outs) + ")"))
    forward = binding_lines(p, "\n".join(forward)) + forward
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
