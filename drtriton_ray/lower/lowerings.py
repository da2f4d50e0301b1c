"""One registration per operator: how the reference lowering launches it. Elementwise operators are registered by
their Triton expression (`lower/elementwise.py`, EXPRESSIONS) and fused into generated kernels; every other registry
operator (and the lowering's own fused nodes, NormReduce and SoftmaxReduce) has a `Lowering` here: the call of its
library wrapper, the library kernel, constexprs and setup it is launched with when it anchors a fused kernel, its
tuning key (the kernel and the sizes its launch configuration depends on) and which fused sides it takes. A new
operator is one `register` call (with its kernel in `lower/kernels.py` and its wrapper in `lower/wrappers.py`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from drtriton_ray.ir import Node
from drtriton_ray.lower import wrappers

REDUCE_OPS = {"Sum": 0, "Mean": 1, "Max": 2, "Min": 3, "ArgMax": 4, "ArgMin": 5, "Var": 6, "Norm": 7}
ALONG_OPS = {"Softmax": 0, "LogSoftmax": 1, "CumSum": 2, "CumMax": 3, "CumMin": 4}
NORM_MODES = {"LayerNorm": 0, "RMSNorm": 1, "GroupNorm": 2, "InstanceNorm": 3, "BatchNorm": 4}
LAYOUT_OPS = ("Transpose", "Permute")  # copies by transpose_tile_kernel, which takes an epilogue
CONV_OPS = ("Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d")
POOL_OPS = ("AvgPool1d", "AvgPool2d", "AvgPool3d", "MaxPool1d", "MaxPool2d", "MaxPool3d")


@dataclass(frozen=True)
class Site:
    """One launch of an operator as the generated code writes it: the node, the names its tensor inputs (x) and
    weights (w) go by there, its first input's shape, its output's, and the launch configuration (a conv's
    "SMALL" taken out as `small`, see tuning.resolved)."""

    node: Node
    x: list[str]
    w: list[str]
    shape: tuple
    out_shape: tuple
    config: dict | None = None
    small: bool = False
    dtype_of: str = ""  # a tensor of the dtype the kernel stores, where it is not x[0]'s (a fused group converts)

    @property
    def params(self) -> dict:
        return self.node.params

    @property
    def like(self) -> str:
        """The tensor a setup allocates the output like (its dtype and device): x[0], or `dtype_of`."""
        return self.dtype_of or self.x[0]

    @property
    def cfg(self) -> str:
        """The config as a setup call's last argument ("" without one)."""
        return f", config={self.config!r}" if self.config else ""

    @property
    def eps(self) -> str:
        """A norm's epsilon as a wrapper's keyword argument ("" for PyTorch's default)."""
        return f", eps={self.params['eps']!r}" if self.params.get("eps") is not None else ""


@dataclass(frozen=True)
class StatsKernel:
    """The first kernel of a two-kernel anchor, which computes statistics the anchor's kernel reads: with `setup`, its
    own setup call (giving stats, stats_grid, stats_args, stats_meta) before the anchor's; without, the anchor's setup
    also gives its stats_args and it shares the anchor's grid and meta."""

    kernel: str
    fixed: dict
    setup: str | None = None


@dataclass(frozen=True)
class AnchorKernel:
    """An operator as the anchor of a fused kernel: the library kernel rewritten for it (lower/fuse.py), its
    op-selecting constexprs fixed, the wrapper's setup call (output, grid, arguments after the input, tiles), a
    statistics kernel launched before it, and a line turning the kernel's output into the result."""

    kernel: str
    fixed: dict
    setup: str
    stats: StatsKernel | None = None
    finish: str | None = None


def _never(node: Node) -> bool:
    return False


def _always(node: Node) -> bool:
    return True


@dataclass(frozen=True)
class Lowering:
    """How one operator is launched. `call`: its library wrapper's call (the forward line of the operator alone);
    `kernel`: the same as a fused kernel's anchor (None: it anchors none); `tuning`: (library kernel, sizes) keying
    its launch configuration in lower/tuning.py's table, or None; `resolve`: what the emitter decides of a config
    before the wrapper runs; `prologue`: whether it takes an elementwise group computed on the values it loads;
    `kept(node)`: whether its kernel can also store a value of that group as a second output (its loads that read
    each input value once are marked `# each value once` in lower/kernels.py); `epilogue(node)`: whether one
    applied before it stores; `keeps_dtype`: an epilogue must end in its output's
    dtype (a copy); `any_dtype`: its setup reads only the dtype and device of the tensor it allocates the output
    like (Site.like), so a fused group may convert (a Cast); `takes_config`: its wrapper has a `config` argument;
    `describe`: the node in a fused kernel's comment, when not its name and dims."""

    call: Callable[[Site], str]
    kernel: Callable[[Site], AnchorKernel] | None = None
    tuning: Callable[[str, dict, list, list], tuple | None] | None = None
    resolve: Callable[[str, dict, list, list, dict | None], dict | None] | None = None
    prologue: bool = False
    kept: Callable[[Node], bool] = _never
    epilogue: Callable[[Node], bool] = _never
    keeps_dtype: bool = False
    any_dtype: bool = False
    takes_config: bool = True
    describe: Callable[[Node], str] | None = None


LOWERINGS: dict[str, Lowering] = {}


def register(ops, **how) -> None:
    """Register each of `ops` (a name or several sharing their hooks, which read the node's op) as `Lowering(**how)`."""
    for op in [ops] if isinstance(ops, str) else ops:
        LOWERINGS[op] = Lowering(**how)


def describe(node: Node) -> str:
    """A node as a fused kernel's comment names it: its operator with its dim, keepdim and groups."""
    lowering = LOWERINGS.get(node.op)
    if lowering and lowering.describe:
        return lowering.describe(node)
    shown = {k: v for k, v in node.params.items() if k in ("dim", "keepdim", "num_groups")}
    return node.op + ("(" + ", ".join(f"{k}={v}" for k, v in shown.items()) + ")" if shown else "")


# reductions over one dim, and operators along one dim (softmax, scans): reduce_kernel, along_dim_kernel


def _rows_by_extent(params: dict, x: list[int]) -> tuple[int, int]:
    d = params["dim"] % len(x)
    return math.prod(x[:d] + x[d + 1 :]), x[d]


def _reduce(s: Site) -> AnchorKernel:
    p, op = s.params, REDUCE_OPS[s.node.op]
    setup = f"reduce_setup({s.shape}, {s.like}, {p['dim']}, {p['keepdim']}, {op}{s.cfg})"
    return AnchorKernel("reduce_kernel", {"OP": op}, setup)


register(
    REDUCE_OPS,
    call=lambda s: f"reduce_dim({s.x[0]}, {s.params['dim']}, {s.params['keepdim']}, {REDUCE_OPS[s.node.op]})",
    kernel=_reduce,
    tuning=lambda op, params, shapes, out: ("reduce_kernel", _rows_by_extent(params, list(shapes[0]))),
    prologue=True,
    epilogue=lambda node: node.op not in ("ArgMax", "ArgMin"),  # an index's int64 output is not fused
    any_dtype=True,
)


def _long_column(shape, dim: int) -> bool:
    """Whether an along-dim operator's columns are long enough to loop over (along_loop_kernel)."""
    return wrappers.long_column(*wrappers.split_at(shape, dim)[1:])


def _along_call(s: Site) -> str:
    call = "along_dim_long" if _long_column(s.shape, s.params["dim"]) else "along_dim"
    return f"{call}({s.x[0]}, {s.params['dim']}, {ALONG_OPS[s.node.op]})"


def _along(s: Site) -> AnchorKernel:
    loop = _long_column(s.shape, s.params["dim"])
    setup = f"along_setup({s.shape}, {s.like}, {s.params['dim']}{s.cfg}{', loop=True' if loop else ''})"
    return AnchorKernel(("along_loop_kernel" if loop else "along_dim_kernel"), {"OP": ALONG_OPS[s.node.op]}, setup)


def _along_tuning(op: str, params: dict, shapes: list, out: list):
    x = list(shapes[0])
    kernel = "along_loop_kernel" if _long_column(x, params["dim"]) else "along_dim_kernel"
    return kernel, _rows_by_extent(params, x)


register(
    ALONG_OPS, call=_along_call, kernel=_along, tuning=_along_tuning, prologue=True, epilogue=_always, any_dtype=True
)


# a softmax read only by a reduction (lower/passes.py): softmax_stats_kernel, then softmax_reduce_kernel


def _softmax_reduce_call(s: Site) -> str:
    p = s.params
    log, op = ALONG_OPS[p["softmax"]], REDUCE_OPS[p["op"]]
    return f"softmax_reduce({s.x[0]}, {p['sdim']}, {log}, {p['dim']}, {p['keepdim']}, {op})"


def _softmax_reduce(s: Site) -> AnchorKernel:
    p = s.params
    log, op = ALONG_OPS[p["softmax"]], REDUCE_OPS[p["op"]]
    mode = wrappers.softmax_stats_mode(s.shape, p["sdim"], p["dim"])
    setup = f"softmax_reduce_setup({s.shape}, {s.like}, stats, {p['sdim']}, {p['dim']}, {p['keepdim']}, {op}{s.cfg})"
    stats = StatsKernel("softmax_stats_kernel", {"LOG": log}, f"softmax_stats_setup({s.shape}, {s.like}, {p['sdim']})")
    return AnchorKernel("softmax_reduce_kernel", {"OP": op, "LOG": log, "STATS": mode}, setup, stats)


register(
    "SoftmaxReduce",
    call=_softmax_reduce_call,
    kernel=_softmax_reduce,
    # its reduction's kernel (the statistics' kernel takes the wrapper's tile)
    tuning=lambda op, params, shapes, out: ("softmax_reduce_kernel", _rows_by_extent(params, list(shapes[0]))),
    prologue=True,
    epilogue=lambda node: node.params["op"] not in ("ArgMax", "ArgMin"),
    any_dtype=True,
    describe=lambda n: (
        f"{n.params['softmax']}(dim={n.params['sdim']}) -> " + describe(Node(n.params["op"], [], [], n.params))
    ),
)


# norms: a program per row (row_norm_kernel, or row_norm_persistent_kernel for many rows of 4097 to 8192 values),
# batch_norm_kernel, or for few long rows split_norm's two kernels (norm_stats_kernel, norm_apply_kernel)


def _norm_weights(s: Site, op: str) -> tuple[int, int, str | None, str | None]:
    """(mode, groups, weight, bias) of a norm (split_norm_setup's modes), its weights named as in s.w."""
    weight, bias = (s.w + [None, None])[:2]
    return NORM_MODES[op], s.params.get("num_groups") if op == "GroupNorm" else 1, weight, bias


def _row(s: Site, op: str) -> str:
    """An RMS norm without a weight (lower/passes.py: the weight comes after a cast) as its wrappers' keyword
    argument `row`: the rows' length, which they otherwise take from the weight ("" where there is one)."""
    if op != "RMSNorm" or s.w:
        return ""
    return ", row=" + " * ".join(str(d) for d in s.shape[len(s.shape) - s.params.get("k", 1) :])


def norm_rows(op: str, params: dict, shape: list) -> tuple[int, int]:
    """(rows, values a row) of a norm over `shape`: what one program reduces (a channel for batch norm)."""
    x = list(shape)
    rows = x[0] * (params.get("num_groups") or x[1]) if op in ("GroupNorm", "InstanceNorm") else None
    rows = x[1] if op == "BatchNorm" else rows or math.prod(x[: len(x) - params.get("k", 1)])
    return rows, math.prod(x) // rows


def _norm_tuning(op: str, params: dict, shapes: list, out: list):
    rows, length = norm_rows(op, params, shapes[0])
    if wrappers.few_long_rows(rows, length) and not params.get("unsplit"):  # unsplit: lower/passes.py unsplit_norms
        return "split_norm", (rows, length)
    if op in ("LayerNorm", "RMSNorm") and (wrappers.whole_rows(length) or params.get("one_pass")):
        return "row_norm_persistent_kernel", (rows, length)  # one_pass: lower/passes.py one_pass_norms
    return ("batch_norm_kernel" if op == "BatchNorm" else "row_norm_kernel"), (rows, length)


def _norm_kernel(s: Site) -> str:
    return _norm_tuning(s.node.op, s.params, [s.shape], [])[0]


ONE_NORM = {  # a norm's own wrapper, where it is not split or persistent
    "BatchNorm": lambda s: f"batch_norm({s.x[0]}, {s.w[0]}, {s.w[1]}{s.eps})",
    "LayerNorm": lambda s: f"layer_norm({s.x[0]}, {s.w[0]}, {s.w[1]}{s.eps})",
    "RMSNorm": lambda s: f"rms_norm({s.x[0]}, {_norm_weights(s, 'RMSNorm')[2]}{s.eps}{_row(s, 'RMSNorm')})",
    "GroupNorm": lambda s: f"group_norm({s.x[0]}, {s.params.get('num_groups')}, {s.w[0]}, {s.w[1]}{s.eps})",
    "InstanceNorm": lambda s: f"instance_norm({s.x[0]}{s.eps})",
}


def _norm_call(s: Site) -> str:
    kernel = _norm_kernel(s)
    mode, groups, weight, bias = _norm_weights(s, s.node.op)
    if kernel == "split_norm":
        return f"split_norm({s.x[0]}, {weight}, {bias}, {mode}, {groups}{s.eps}{_row(s, s.node.op)})"
    if kernel == "row_norm_persistent_kernel":
        return f"row_norm_persistent({s.x[0]}, {weight}, {bias}, {mode}{s.eps}{_row(s, s.node.op)})"
    return ONE_NORM[s.node.op](s)


def _norm(s: Site) -> AnchorKernel:
    kernel = _norm_kernel(s)
    mode, groups, weight, bias = _norm_weights(s, s.node.op)
    fixed = {"MODE": mode, "HAS_W": weight is not None, "HAS_B": bias is not None}
    args, kw = f"{s.shape}, {s.like}, {weight}, {bias}, {mode}", f"{s.cfg}{s.eps}{_row(s, s.node.op)}"
    if kernel == "split_norm":  # the statistics' kernel shares the setup's grid and meta
        stats = StatsKernel("norm_stats_kernel", {"MODE": mode})
        return AnchorKernel("norm_apply_kernel", fixed, f"split_norm_setup({args}, {groups}{kw})", stats)
    if kernel == "row_norm_persistent_kernel":
        return AnchorKernel(kernel, fixed, f"row_norm_persistent_setup({args}{kw})")
    if kernel == "row_norm_kernel":
        return AnchorKernel(kernel, fixed, f"row_norm_setup({args}, {groups}{kw})")
    return AnchorKernel(kernel, {}, f"batch_norm_setup({s.shape}, {s.like}, {s.w[0]}, {s.w[1]}{s.cfg}{s.eps})")


register(
    NORM_MODES,
    call=_norm_call,
    kernel=_norm,
    tuning=_norm_tuning,
    prologue=True,
    kept=lambda node: node.op != "BatchNorm",  # row_norm_kernel, row_norm_persistent_kernel, norm_apply_kernel
    epilogue=_always,
    any_dtype=True,
)


# a layer or RMS norm read only by a reduction over outer dims (lower/passes.py): norm_reduce_kernel


def _norm_reduce_call(s: Site) -> str:
    p = s.params
    mode, _, weight, bias = _norm_weights(s, p["norm"])
    op, row = REDUCE_OPS[p["op"]], _row(s, p["norm"])
    return f"norm_reduce({s.x[0]}, {weight}, {bias}, {mode}, {p['dim']}, {p['keepdim']}, {op}{s.eps}{row})"


def _norm_reduce(s: Site) -> AnchorKernel:
    """The kernel stores partial results, norm_reduce_finish makes the output."""
    p = s.params
    mode, _, weight, bias = _norm_weights(s, p["norm"])
    fixed = {"MODE": mode, "OP": REDUCE_OPS[p["op"]], "HAS_W": weight is not None, "HAS_B": bias is not None}
    kw = f"{s.cfg}{s.eps}{_row(s, p['norm'])}"
    setup = f"norm_reduce_setup({s.shape}, {s.like}, {weight}, {bias}, {mode}, {p['dim']}{kw})"
    finish = f"out = norm_reduce_finish(out, {s.shape}, {s.like}, {p['dim']}, {p['keepdim']}, {fixed['OP']})"
    return AnchorKernel("norm_reduce_kernel", fixed, setup, finish=finish)


register(
    "NormReduce",
    call=_norm_reduce_call,
    kernel=_norm_reduce,
    prologue=True,
    any_dtype=True,
    describe=lambda n: f"{n.params['norm']} -> " + describe(Node(n.params["op"], [], [], n.params)),
)


# matmuls: matmul_kernel


def _matmul_tuning(op: str, params: dict, shapes: list, out: list):
    return "matmul_kernel", (math.prod(out) // out[-1], out[-1], list(shapes[0])[-1])


def _like(s: Site) -> str:
    """A matmul setup's `like` argument where a fused epilogue converts (its output in another dtype than x's)."""
    return f", like={s.dtype_of}" if s.dtype_of else ""


def _bias(s: Site) -> str | None:
    """A linear's bias argument: its second weight, None for Hugging Face's projections (LinearNoBias)."""
    return s.w[1] if s.node.op == "Linear" else None


def _linear(s: Site) -> AnchorKernel:
    setup = f"linear_setup({s.x[0]}, {s.w[0]}, {_bias(s)}{s.cfg}{_like(s)})"
    return AnchorKernel("matmul_kernel", {"HAS_BIAS": _bias(s) is not None}, setup)


register(
    ("Matmul", "Bmm"),
    call=lambda s: f"matmul({s.x[0]}, {s.x[1]})",
    kernel=lambda s: AnchorKernel(
        "matmul_kernel", {"HAS_BIAS": False}, f"matmul_setup({s.x[0]}, {s.x[1]}{s.cfg}{_like(s)})"
    ),
    tuning=_matmul_tuning,
    epilogue=_always,
    any_dtype=True,
)
# each output row from its input row alone (a slice of the rows is the product of a slice of the input's rows), and
# linear_setup reads a strided input's rows in place (its leading dims as batches)
LINEARS = ("Linear", "LinearNoBias")
register(  # LinearNoBias: Llama's q/k/v/o, gate/up/down and lm_head projections, fused as Linear's
    LINEARS,
    call=lambda s: f"linear({s.x[0]}, {s.w[0]}, {_bias(s)})",
    kernel=_linear,
    tuning=_matmul_tuning,
    epilogue=_always,
    any_dtype=True,
)


# convolutions, direct and transposed: conv_kernel (tl.dot), or conv_small_kernel for few channels x taps


def phase_taps(params: dict, weight: list[int], transposed: bool) -> int:
    """A conv's kernel taps per phase (all of them for a direct conv; a transposed one's phase is reached by every
    stride / gcd(stride, dilation)-th tap per dim), as conv_args counts them."""
    stride, dilation = params["stride"], params["dilation"]
    step = next(t for t in range(1, stride + 1) if t * dilation % stride == 0) if transposed else 1
    return math.prod(-(-k // step) for k in weight[2:])


def _conv_resolve(op: str, params: dict, in_shapes: list[list[int]], out_shape, config: dict | None):
    """A config that says sets "SMALL"; one without it was tuned for conv_kernel; none: wrappers.small_reduction
    (input channels a group, taps, output positions)."""
    if config and "SMALL" in config:
        return config
    if config:
        return {**config, "SMALL": False}
    transposed = op.startswith("ConvTranspose")
    cin_g = in_shapes[0][1] // params["groups"]
    # int32 positions, and input images under 2^31 values: conv_small_kernel's sizes are constants, and one past
    # int32 does not combine with its int32 indices
    positions = max(math.prod(out_shape) // out_shape[1], math.prod(in_shapes[0][1:]))
    return {"SMALL": wrappers.small_reduction(cin_g, phase_taps(params, in_shapes[1], transposed), positions)}


def _conv_args(s: Site) -> str:
    p = s.params
    return f"{s.x[0]}, {s.w[0]}, {s.w[1]}, {s.out_shape}, {p['stride']}, {p['padding']}, {p['dilation']}"


def _conv_call(s: Site) -> str:
    transposed = s.node.op.startswith("ConvTranspose")
    return f"{'conv_small' if s.small else 'conv'}({_conv_args(s)}, {s.params['groups']}, {transposed})"


def _conv(s: Site) -> AnchorKernel:
    transposed = s.node.op.startswith("ConvTranspose")
    name = "conv_small" if s.small else "conv"
    setup = f"{name}_setup({_conv_args(s)}, {s.params['groups']}, {transposed}{s.cfg})"
    return AnchorKernel(f"{name}_kernel", {"TRANSPOSED": transposed}, setup)


def _conv_tuning(op: str, params: dict, shapes: list, out: list):
    return "conv_kernel", (out[1], math.prod(shapes[1][1:]), math.prod(out) // out[1])


register(CONV_OPS, call=_conv_call, kernel=_conv, tuning=_conv_tuning, resolve=_conv_resolve, epilogue=_always)


# pooling: pool_rows_kernel


def _pool_call(s: Site) -> str:
    p = s.params
    is_max = s.node.op.startswith("Max")
    return f"pool({s.x[0]}, {s.out_shape}, {p['kernel']}, {p['stride']}, {p['padding']}, {is_max})"


def _pool(s: Site) -> AnchorKernel:
    p = s.params
    setup = f"pool_setup({s.x[0]}, {s.out_shape}, {p['kernel']}, {p['stride']}, {p['padding']}{s.cfg})"
    return AnchorKernel("pool_rows_kernel", {"IS_MAX": s.node.op.startswith("Max")}, setup)


def _pool_tuning(op: str, params: dict, shapes: list, out: list):
    taps = params["kernel"] ** (len(out) - 2)
    return "pool_rows_kernel", (math.prod(out[:-1]), out[-1], taps)  # rows (n*c, od, oh), OW, taps


register(POOL_OPS, call=_pool_call, kernel=_pool, tuning=_pool_tuning, epilogue=_always)


# layout: transposes and permutations (transpose_tile_kernel), views and copies


def permutation(node: Node, ndim: int) -> tuple:
    """A Transpose's or Permute's dims, as x.permute takes them (non-negative)."""
    p = node.params
    dims = p["dims"] if node.op == "Permute" else wrappers.swapped(ndim, p["dim0"], p["dim1"])
    return tuple(d % ndim for d in dims)


def _permute(s: Site) -> AnchorKernel:
    return AnchorKernel(
        "transpose_tile_kernel", {}, f"permute_setup({s.x[0]}, {permutation(s.node, len(s.shape))}{s.cfg})"
    )


LAYOUT = {"kernel": _permute, "epilogue": _always, "keeps_dtype": True}
register(
    "Transpose",
    call=lambda s: f"transpose({s.x[0]}, {s.params.get('dim0')}, {s.params.get('dim1')})",
    takes_config=False,
    **LAYOUT,
)
register("Permute", call=lambda s: f"permute_copy({s.x[0]}, {tuple(s.params.get('dims', ()))})", **LAYOUT)
# copies whose wrappers take no config
register("Triu", call=lambda s: f"triangle({s.x[0]}, {s.params.get('diagonal')}, True)", takes_config=False)
register("Tril", call=lambda s: f"triangle({s.x[0]}, {s.params.get('diagonal')}, False)", takes_config=False)
register("Cat", call=lambda s: f"cat({s.x[0]}, {s.x[1]}, {s.params.get('dim')})", takes_config=False)
register("Stack", call=lambda s: f"stack({s.x[0]}, {s.x[1]}, {s.params.get('dim')})", takes_config=False)
register("View", call=lambda s: f"reshape_view({s.x[0]}, {tuple(s.params.get('shape', ()))})", takes_config=False)
register("Expand", call=lambda s: f"expand_copy({s.x[0]}, {tuple(s.params.get('shape', ()))})", takes_config=False)
register(
    "Narrow",
    call=lambda s: f"narrow_copy({s.x[0]}, {s.params.get('dim')}, {s.params.get('start')}, {s.params.get('length')})",
    takes_config=False,
)
register(
    "Select",
    call=lambda s: f"select_copy({s.x[0]}, {s.params.get('dim')}, {s.params.get('index')})",
    takes_config=False,
)

# one pass over each row, online: the log-sum-exp (softmax_stats_kernel's LOG 2), the cross-entropy of 2-D logits
register(
    "LogSumExp",
    call=lambda s: f"logsumexp({s.x[0]}, {s.params['dim']}, {s.params['keepdim']})",
    tuning=lambda op, params, shapes, out: ("softmax_stats_kernel", _rows_by_extent(params, list(shapes[0]))),
)
CE_REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}
register(
    "CrossEntropy",
    call=lambda s: (
        f"cross_entropy({s.x[0]}, {s.x[1]}, {s.params['ignore_index']}, {CE_REDUCTIONS[s.params['reduction']]}"
        + (", out_dtype=torch.float32)" if s.params.get("widened") else ")")  # lower/passes.py read_logits_in_place
    ),
)
