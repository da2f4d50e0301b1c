"""ATen calls of a captured program to operators of the registry, where one computes exactly the same thing.

One small function per ATen family. Each gets the call (`Site`: its arguments bound by the ATen schema, defaults
filled in) and returns the registry nodes that replace it, or a one-line reason why none does; the call then stays
a `Torch` node (capture/export.py). Exact means: same values on the same tensors, the registry template's defaults
included (F.layer_norm's eps 1e-5, torch.var's unbiased estimate, F.gelu's erf form, F.softplus's beta 1 and
threshold 20), one float dtype throughout (inputs and output of one dtype, as the registry's templates compute; a
change of dtype is a Cast of its own), and a weight slot only for the module's own tensors (role "weight": parameters,
buffers, constants), since a sub-problem makes weights parameters.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Callable

import torch

from drtriton_ray.ir import Node, Tensor

Result = list[Node] | str  # the registry nodes for a call, or why there are none
FLOATS = ("float32", "float16", "bfloat16", "float64")


def bind(target, args: tuple, kwargs: dict) -> dict:
    """The call's arguments by their schema names, defaults filled in."""
    out = {}
    for i, a in enumerate(target._schema.arguments):
        if i < len(args):
            out[a.name] = args[i]
        elif a.name in kwargs:
            out[a.name] = kwargs[a.name]
        else:
            out[a.name] = a.default_value if a.has_default_value() else None
    return out


def scalar(value):
    """A Python number as a template param: non-finite values as source text (`float('-inf')`), so that both the
    PyTorch template and the Triton expression read them."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({str(value)!r})"
    return value


@dataclass
class Site:
    """One ATen call being mapped: its bound arguments, the graph's tensors so far, the ids of its outputs."""

    target: str  # "aten.add.Tensor"
    args: dict
    fx: torch.fx.Node
    ids: Callable  # an FX node -> its tensor id (None for anything else)
    tensors: dict[int, Tensor]
    out: list

    def t(self, name: str) -> int | None:
        v = self.args.get(name)
        return self.ids(v) if isinstance(v, torch.fx.Node) else None

    def is_number(self, name: str) -> bool:
        v = self.args.get(name)
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    def is_weight(self, tid) -> bool:
        return tid is not None and self.tensors[tid].role == "weight"

    def floats(self, *tids) -> bool:
        """Every tensor (and the first output) of one floating dtype: what a registry node computes in."""
        dtype = self.tensors[self.out[0]].dtype if self.out and self.out[0] is not None else None
        return dtype in FLOATS and all(t is not None and self.tensors[t].dtype == dtype for t in tids)

    def rank(self, tid) -> int:
        return len(self.tensors[tid].shape)

    def out_shape(self) -> list[int]:
        return list(self.tensors[self.out[0]].shape)

    def node(self, op: str, inputs: list[int], params: dict | None = None, weights=(), out: int = 0) -> list[Node]:
        return [Node(op, list(inputs), [self.out[out]], dict(params or {}), list(weights))]

    def first_only(self) -> bool:
        """Only the first result of a multi-result call is read (values of max.dim, not indices)."""
        return all(u.target is operator.getitem and u.args[1] == 0 for u in self.fx.users)


def _dim(value) -> int | None:
    """One dim from an int or a one-element list; None for anything else."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, (list, tuple)) and len(value) == 1:
        return value[0]
    return None


def _uniform(value, n: int):
    """A per-dim setting (int or list) as one int when every spatial dim has it; None otherwise."""
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if len(values) == 1:
        values = values * n
    return values[0] if len(values) == n and len(set(values)) == 1 else None


# -- elementwise -------------------------------------------------------------------------------
def unary(op: str, **fixed) -> Callable[[Site], Result]:
    """An activation or math function of `self` alone; `fixed` are ATen arguments the registry form requires."""

    def mapper(s: Site) -> Result:
        x = s.t("self")
        if not s.floats(x):
            return "not a floating tensor of the output's dtype"
        for name, want in fixed.items():
            if s.args.get(name) != want:
                return f"{name}={s.args.get(name)!r}, the registry's {op} has {name}={want!r}"
        return s.node(op, [x])

    return mapper


def with_params(op: str, **names) -> Callable[[Site], Result]:
    """An elementwise function with numeric params: registry param name -> ATen argument name."""

    def mapper(s: Site) -> Result:
        x = s.t("self")
        if not s.floats(x) or not all(s.is_number(a) for a in names.values()):
            return "not a floating tensor with numeric arguments"
        return s.node(op, [x], {p: scalar(s.args[a]) for p, a in names.items()})

    return mapper


def binary(tensor_op: str, scalar_op: str | None, swap: bool = False) -> Callable[[Site], Result]:
    """add/sub/mul/div and friends: two tensors (broadcasting) or a tensor and a Python number; alpha 1 only."""

    def mapper(s: Site) -> Result:
        if s.args.get("alpha", 1) != 1:
            return "alpha other than 1"
        x, y = s.t("self"), s.t("other")
        if y is not None and s.floats(x, y):
            return s.node(tensor_op, [y, x] if swap else [x, y])
        if y is None and scalar_op and s.is_number("other") and s.floats(x):
            return s.node(scalar_op, [x], {"value": scalar(s.args["other"])})
        return "operands of another dtype, or a non-numeric scalar"

    return mapper


def elu(s: Site) -> Result:
    if s.args["scale"] != 1 or s.args["input_scale"] != 1:
        return "scale or input_scale other than 1"
    return with_params("ELU", alpha="alpha")(s)


def softplus(s: Site) -> Result:
    if s.args["beta"] != 1 or s.args["threshold"] != 20:
        return "beta or threshold other than F.softplus's defaults"
    return unary("Softplus")(s)


def clamp(s: Site) -> Result:
    lo, hi = s.args.get("min"), s.args.get("max")
    if lo is not None and hi is not None:
        return with_params("Clamp", lo="min", hi="max")(s)
    if lo is not None:
        return with_params("ClampMin", lo="min")(s)
    return with_params("ClampMax", hi="max")(s) if hi is not None else "clamp without bounds"


def pow_scalar(s: Site) -> Result:
    """x ** c; the exponents PyTorch computes by a special case map to those operators (same values)."""
    x, e = s.t("self"), s.args["exponent"]
    if not s.floats(x) or not s.is_number("exponent"):
        return "not a floating tensor to a numeric power"
    special = {2: "Square", 0.5: "Sqrt", -0.5: "Rsqrt", -1: "Reciprocal"}
    if e in special:
        return s.node(special[e], [x])
    return s.node("PowScalar", [x], {"exponent": scalar(e)})


def pow_tensor(s: Site) -> Result:
    x, e = s.t("self"), s.t("exponent")
    return s.node("Pow", [x, e]) if s.floats(x, e) else "operands of another dtype"


def where(s: Site) -> Result:
    """torch.where(t > 0, a, b) is the registry's Where (the comparison, read by nothing else, then goes); any other
    boolean condition is WhereMask."""
    cond, a, b = s.t("condition"), s.t("self"), s.t("other")
    if not s.floats(a, b) or cond is None:
        return "branches of another dtype"
    gt = s.args["condition"]
    if str(gt.target) == "aten.gt.Scalar" and gt.args[1] == 0 and s.floats(s.ids(gt.args[0])):
        return s.node("Where", [s.ids(gt.args[0]), a, b])
    if s.tensors[cond].dtype == "bool":
        return s.node("WhereMask", [cond, a, b])
    return "a condition that is not a boolean tensor"


def masked_fill(s: Site) -> Result:
    x, mask = s.t("self"), s.t("mask")
    if not s.floats(x) or mask is None or s.tensors[mask].dtype != "bool" or not s.is_number("value"):
        return "not a floating tensor, a boolean mask and a number"
    return s.node("MaskedFill", [x, mask], {"value": scalar(s.args["value"])})


CAST_DTYPES = ("float32", "float16", "bfloat16")  # the kernels compute in float32: float64 stays PyTorch
INT_DTYPES = ("int64", "int32", "int16", "int8", "uint8", "bool")
PLAIN_FORMATS = (None, torch.preserve_format, torch.contiguous_format)


def cast(s: Site) -> Result:
    """A conversion between floating dtypes on one device (x.float(), x.to(torch.bfloat16), x.type_as(y)), or of
    integers or booleans to float32 (Hugging Face's rotary embedding's position_ids.float(), mask.float()): the
    registry's Cast to the output's dtype. A cast to the dtype x has is an alias (is_alias), no node. An integer to
    a 16-bit dtype stays PyTorch's (the kernels' float32 step would round twice past 2^24)."""
    x = s.t("self")
    source, target = (s.tensors[t].dtype if t is not None else None for t in (x, s.out[0]))
    widening = source in INT_DTYPES and target == "float32"
    if not widening and (source not in CAST_DTYPES or target not in CAST_DTYPES or source == target):
        return "not a conversion between float32, bfloat16 and float16, nor of integers to float32"
    if s.args["self"].meta["val"].device != s.fx.meta["val"].device:
        return "a device move"
    if s.args.get("layout") not in (None, torch.strided) or s.args.get("memory_format") not in PLAIN_FORMATS:
        return "a layout or memory format change"
    return s.node("Cast", [x], {"dtype": target})


# binary operators whose tensor operands PyTorch converts to the result's dtype first (type promotion): a bfloat16 or
# float16 operand of a float32 result is exactly a Cast to float32 (the widening loses nothing), so the call is the
# registry operator on Casts. A result narrower than an operand (a float32 0-dim tensor times a bfloat16 one) is not.
PROMOTING = {
    *(f"aten.{n}.Tensor" for n in ("add", "sub", "mul", "div", "rsub")),
    "aten.maximum.default",
    "aten.minimum.default",
    "aten.pow.Tensor_Tensor",
    "aten.where.self",
}
WIDENINGS = {("bfloat16", "float32"), ("float16", "float32")}


def widened(target: str, args: dict, out: torch.Tensor) -> list[torch.fx.Node]:
    """The tensor operands of a call that type promotion widens exactly to its result's dtype (PROMOTING)."""
    if target not in PROMOTING or not isinstance(out, torch.Tensor):
        return []
    to = dtype_name(out)
    vals = [(v, v.meta.get("val")) for v in args.values() if isinstance(v, torch.fx.Node)]
    return [v for v, val in vals if isinstance(val, torch.Tensor) and (dtype_name(val), to) in WIDENINGS]


def dtype_name(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


# -- contractions, convolutions, pooling ---------------------------------------------------------
def matmul(op: str, min_rank: int) -> Callable[[Site], Result]:
    def mapper(s: Site) -> Result:
        a, b = s.t("self"), s.t("other") if "other" in s.args else s.t("mat2")
        if not s.floats(a, b):
            return "operands of another dtype"
        if min(s.rank(a), s.rank(b)) < min_rank:
            return "a 1-dim operand (the registry's matmul takes matrices)"
        if unit_contraction(s.tensors[a], s.tensors[b]):
            return s.node("Mul", [a, b])
        return s.node(op, [a, b])

    return mapper


def unit_contraction(a: Tensor, b: Tensor) -> bool:
    """A product over one fixed element (`a[..., M, 1] @ b[..., 1, N]`, as Hugging Face's rotary embedding makes its
    angles): an outer product, exactly the broadcast `a * b` (one multiply a result, no sum), which fuses with its
    neighbours where a library matmul call would stay apart."""
    k_a, k_b = a.dim_names()[-1], b.dim_names()[-2]
    return a.shape[-1] == 1 and b.shape[-2] == 1 and not k_a and not k_b


def linear(s: Site) -> Result:
    x, w, b = s.t("input"), s.t("weight"), s.t("bias")
    if not s.is_weight(w) or not s.floats(x, w):
        return "a weight that is not the module's own tensor"
    if s.args["bias"] is None:
        return s.node("LinearNoBias", [x], weights=[w])
    return s.node("Linear", [x], weights=[w, b]) if s.is_weight(b) and s.floats(b) else "a bias of another kind"


def conv(n: int, transposed: bool) -> Callable[[Site], Result]:
    """F.conv{n}d / F.conv_transpose{n}d with one stride, padding and dilation for every spatial dim and a bias."""
    names = ["stride", "padding", "dilation"] + (["output_padding"] if transposed else [])
    op = f"ConvTranspose{n}d" if transposed else f"Conv{n}d"

    def mapper(s: Site) -> Result:
        x, w, b = s.t("input"), s.t("weight"), s.t("bias")
        if not (s.is_weight(w) and s.is_weight(b) and s.floats(x, w, b)):
            return "a weight or bias that is not the module's own tensor (a conv without bias stays PyTorch)"
        params = {k: _uniform(s.args[k], n) for k in names}
        if any(not isinstance(v, int) for v in params.values()):
            return "per-dim stride, padding or dilation (the registry's take one for every dim)"
        return s.node(op, [x], {**params, "groups": s.args["groups"]}, [w, b])

    return mapper


def pool(n: int, kind: str) -> Callable[[Site], Result]:
    """F.{max,avg}_pool{n}d with square windows, no ceil mode, no dilation, padding counted in averages."""

    def mapper(s: Site) -> Result:
        x = s.t("self")
        kernel = _uniform(s.args["kernel_size"], n)
        stride = _uniform(s.args["stride"], n) if s.args["stride"] else kernel
        padding = _uniform(s.args["padding"], n)
        plain = not s.args["ceil_mode"] and (
            _uniform(s.args["dilation"], n) == 1
            if kind == "max"
            else s.args.get("count_include_pad", True) and s.args.get("divisor_override") is None
        )
        if not s.floats(x) or None in (kernel, stride, padding) or not plain:
            return "per-dim windows, ceil mode, dilation or a divisor the registry's pooling lacks"
        return s.node(f"{kind.title()}Pool{n}d", [x], {"kernel": kernel, "stride": stride, "padding": padding})

    return mapper


# -- normalisations --------------------------------------------------------------------------------
def _affine(s: Site, names: list[str]) -> list[int] | None:
    ids = [s.t(k) for k in names]
    return ids if all(s.is_weight(t) and s.floats(t) for t in ids) else None


def eps(s: Site, default) -> dict:
    """A norm's epsilon as a param where it is not PyTorch's default (BERT's 1e-12, Llama's 1e-6), so that programs
    with the default serialize as before."""
    value = s.args.get("eps")
    return {} if value == default or not isinstance(value, (int, float)) else {"eps": float(value)}


def layer_norm(s: Site) -> Result:
    x, weights = s.t("input"), _affine(s, ["weight", "bias"])
    if not s.floats(x) or weights is None:
        return "no affine weight and bias of the module"
    return s.node("LayerNorm", [x], {"k": len(s.args["normalized_shape"]), **eps(s, 1e-5)}, weights)


def rms_norm(s: Site) -> Result:
    x, weights = s.t("input"), _affine(s, ["weight"])
    if not s.floats(x) or weights is None:
        return "no weight of the module"
    return s.node("RMSNorm", [x], {"k": len(s.args["normalized_shape"]), **eps(s, None)}, weights)


def group_norm(s: Site) -> Result:
    x, weights = s.t("input"), _affine(s, ["weight", "bias"])
    if not s.floats(x) or weights is None:
        return "no affine weight and bias of the module"
    return s.node("GroupNorm", [x], {"num_groups": s.args["num_groups"], **eps(s, 1e-5)}, weights)


def instance_norm(s: Site) -> Result:
    x = s.t("input")
    plain = all(s.args[k] is None for k in ("weight", "bias", "running_mean", "running_var"))
    if not s.floats(x) or not plain or not s.args["use_input_stats"] or s.rank(x) < 3:
        return "affine weights or running statistics"
    return s.node("InstanceNorm", [x], eps(s, 1e-5))


def batch_norm(s: Site) -> Result:
    """Batch statistics (training mode) are the registry's BatchNorm; the running-statistics update the call also
    makes is a side effect on buffers, which no output reads."""
    x, weights = s.t("input"), _affine(s, ["weight", "bias"])
    if not s.floats(x) or weights is None or not s.args["training"]:
        return "eval mode (running statistics) or no affine weights"
    if any(u.target is operator.getitem and u.args[1] in (1, 2) for u in s.fx.users):
        return "the saved statistics are read"
    return s.node("BatchNorm", [x], eps(s, 1e-5), weights=weights)


# -- reductions, scans, softmax --------------------------------------------------------------------
def reduce(op: str, dim_arg: str = "dim", **fixed) -> Callable[[Site], Result]:
    """A reduction along one dim; `fixed`: ATen arguments and the values the registry form allows."""

    def mapper(s: Site) -> Result:
        x, dim = s.t("self"), _dim(s.args.get(dim_arg))
        if dim is None:
            return "a reduction over several dims or all of them"
        bad = next((k for k, allowed in fixed.items() if s.args.get(k) not in allowed), None)
        if bad:
            return f"{bad}={s.args.get(bad)!r}"
        if not (s.tensors[x].dtype in FLOATS if op.startswith("Arg") else s.floats(x)):
            return "not a floating tensor of the output's dtype"
        if len(s.fx.target._schema.returns) > 1 and not s.first_only():
            return "the indices are read"
        return s.node(op, [x], {"dim": dim, "keepdim": bool(s.args.get("keepdim", False))})

    return mapper


def along(op: str) -> Callable[[Site], Result]:
    """Softmax, log-softmax and scans along one dim (values only for cummax/cummin)."""

    def mapper(s: Site) -> Result:
        x = s.t("self")
        if not s.floats(x) or s.args.get("dtype") or s.args.get("half_to_float"):
            return "a dtype change or not a floating tensor"
        if len(s.fx.target._schema.returns) > 1 and not s.first_only():
            return "the indices are read"
        return s.node(op, [x], {"dim": s.args["dim"]})

    return mapper


def logsumexp(s: Site) -> Result:
    x, dim = s.t("self"), _dim(s.args.get("dim"))
    if dim is None:
        return "a log-sum-exp over several dims"
    if not s.floats(x):
        return "not a floating tensor of the output's dtype"
    return s.node("LogSumExp", [x], {"dim": dim, "keepdim": bool(s.args.get("keepdim", False))})


CE_REDUCTION = {0: "none", 1: "mean", 2: "sum"}  # ATen's reduction enum


def cross_entropy(s: Site) -> Result:
    """F.cross_entropy of 2-D logits and class indices (Hugging Face's loss on flattened tokens), ignore_index kept;
    class weights and label smoothing stay PyTorch."""
    x, target = s.t("self"), s.t("target")
    if s.args.get("weight") is not None or s.args.get("label_smoothing", 0.0) != 0.0:
        return "class weights or label smoothing"
    if not s.floats(x) or s.rank(x) != 2 or target is None or s.tensors[target].dtype != "int64":
        return "not 2-D floating logits with int64 class indices"
    params = {"ignore_index": s.args.get("ignore_index", -100), "reduction": CE_REDUCTION[s.args.get("reduction", 1)]}
    return s.node("CrossEntropy", [x, target], params)


# -- layout ----------------------------------------------------------------------------------------
def _same(s: Site, x, bool_ok: bool = False) -> bool:
    """A tensor of the output's dtype; a strided copy (every layout operator but View) takes no booleans."""
    dtype = s.tensors[s.out[0]].dtype
    return x is not None and s.tensors[x].dtype == dtype and (bool_ok or dtype != "bool")


def view(s: Site) -> Result:
    """view, reshape, (un)squeeze, flatten, unflatten: the same values in the output's shape."""
    x = s.t("self")
    return s.node("View", [x], {"shape": s.out_shape()}) if _same(s, x, bool_ok=True) else "a dtype change"


def expand(s: Site) -> Result:
    x = s.t("self")
    return s.node("Expand", [x], {"shape": s.out_shape()}) if _same(s, x) else "a boolean or another dtype"


def permute(s: Site) -> Result:
    x = s.t("self")
    return s.node("Permute", [x], {"dims": list(s.args["dims"])}) if _same(s, x) else "a boolean tensor"


def transpose(s: Site) -> Result:
    x = s.t("self")
    if not _same(s, x):
        return "a boolean tensor"
    if s.target == "aten.t.default":
        return s.node("Transpose", [x], {"dim0": 0, "dim1": 1}) if s.rank(x) == 2 else view(s)
    return s.node("Transpose", [x], {"dim0": s.args["dim0"], "dim1": s.args["dim1"]})


def narrow(s: Site) -> Result:
    """x[..., a:b] (step 1) along one dim."""
    x = s.t("self")
    if not _same(s, x) or s.args["step"] != 1:
        return "a step other than 1, or a boolean tensor"
    dim = s.args["dim"] % s.rank(x)
    size = s.tensors[x].shape[dim]
    start = s.args["start"] or 0
    start = min(max(start + size if start < 0 else start, 0), size)
    return s.node("Narrow", [x], {"dim": dim, "start": start, "length": s.out_shape()[dim]})


def select(s: Site) -> Result:
    x = s.t("self")
    if not _same(s, x):
        return "a boolean tensor"
    dim = s.args["dim"] % s.rank(x)
    index = s.args["index"] % s.tensors[x].shape[dim]
    return s.node("Select", [x], {"dim": dim, "index": index})


def split(s: Site) -> Result:
    """split / chunk / unbind: one Narrow (Select for unbind) per piece, along the dim."""
    x = s.t("self")
    if x is None or s.tensors[x].dtype == "bool":
        return "a boolean tensor"
    dim = s.args["dim"] % s.rank(x)
    nodes, start = [], 0
    for k, out in enumerate(s.out):
        if s.target == "aten.unbind.int":
            nodes.append(Node("Select", [x], [out], {"dim": dim, "index": k}))
            continue
        length = s.tensors[out].shape[dim]
        nodes.append(Node("Narrow", [x], [out], {"dim": dim, "start": start, "length": length}))
        start += length
    return nodes


def join(op: str) -> Callable[[Site], Result]:
    """torch.cat / torch.stack of exactly two tensors."""

    def mapper(s: Site) -> Result:
        parts = s.args["tensors"]
        ids = [s.ids(p) if isinstance(p, torch.fx.Node) else None for p in parts]
        if len(ids) != 2 or not s.floats(*ids):
            return "not two floating tensors of one dtype"
        return s.node(op, ids, {"dim": s.args["dim"]})

    return mapper


def triangle(op: str) -> Callable[[Site], Result]:
    def mapper(s: Site) -> Result:
        x = s.t("self")
        if not s.floats(x) or s.rank(x) < 2:
            return "not a floating matrix"
        return s.node(op, [x], {"diagonal": s.args["diagonal"]})

    return mapper


ACTIVATIONS = {
    "relu": "ReLU",
    "sigmoid": "Sigmoid",
    "tanh": "Tanh",
    "silu": "Swish",
    "selu": "SELU",
    "hardsigmoid": "Hardsigmoid",
    "hardswish": "Hardswish",
    "mish": "Mish",
    "log_sigmoid": "LogSigmoid",
    "abs": "Abs",
    "cos": "Cos",
    "sin": "Sin",
    "exp": "Exp",
    "exp2": "Exp2",
    "neg": "Neg",
    "sqrt": "Sqrt",
    "rsqrt": "Rsqrt",
    "log": "Log",
    "reciprocal": "Reciprocal",
    "erf": "Erf",
    "square": "Square",
}
VIEWS = ["view.default", "reshape.default", "_unsafe_view.default", "unsqueeze.default", "squeeze.dim"]
VIEWS += ["squeeze.dims", "squeeze.default", "flatten.using_ints", "unflatten.int", "view_as.default"]
TABLE: dict[str, Callable[[Site], Result]] = {
    **{f"aten.{name}.default": unary(op) for name, op in ACTIVATIONS.items()},
    "aten.gelu.default": lambda s: unary("GELUTanh" if s.args["approximate"] == "tanh" else "GELU")(s),
    "aten.leaky_relu.default": with_params("LeakyReLU", negative_slope="negative_slope"),
    "aten.hardtanh.default": with_params("HardTanh", lo="min_val", hi="max_val"),
    "aten.elu.default": elu,
    "aten.softplus.default": softplus,
    "aten.clamp.default": clamp,
    "aten.clamp_min.default": clamp,
    "aten.clamp_max.default": clamp,
    "aten.pow.Tensor_Scalar": pow_scalar,
    "aten.pow.Tensor_Tensor": pow_tensor,
    **{
        f"aten.{n}.{o}": binary(op, sop)
        for n, op, sop in [("add", "Add", "AddScalar"), ("sub", "Sub", "SubScalar")]
        for o in ("Tensor", "Scalar")
    },
    **{
        f"aten.{n}.{o}": binary(op, sop)
        for n, op, sop in [("mul", "Mul", "MulScalar"), ("div", "Div", "DivScalar")]
        for o in ("Tensor", "Scalar")
    },
    "aten.rsub.Scalar": binary("Sub", "RSubScalar", swap=True),
    "aten.rsub.Tensor": binary("Sub", "RSubScalar", swap=True),
    "aten.maximum.default": binary("Maximum", None),
    "aten.minimum.default": binary("Minimum", None),
    "aten.where.self": where,
    "aten.masked_fill.Scalar": masked_fill,
    **{f"aten.{name}": cast for name in ("_to_copy.default", "to.dtype", "type_as.default")},
    "aten.matmul.default": matmul("Matmul", 2),
    "aten.mm.default": matmul("Matmul", 2),
    "aten.bmm.default": matmul("Bmm", 3),
    "aten.linear.default": linear,
    **{f"aten.conv{n}d.default": conv(n, False) for n in (1, 2, 3)},
    **{f"aten.conv_transpose{n}d.input": conv(n, True) for n in (1, 2, 3)},
    **{f"aten.{kind}_pool{n}d.default": pool(n, kind) for kind in ("max", "avg") for n in (1, 2, 3)},
    "aten.layer_norm.default": layer_norm,
    "aten.rms_norm.default": rms_norm,
    "aten.group_norm.default": group_norm,
    "aten.instance_norm.default": instance_norm,
    "aten.batch_norm.default": batch_norm,
    "aten._native_batch_norm_legit_functional.default": batch_norm,
    "aten._native_batch_norm_legit.no_stats": batch_norm,
    "aten.sum.dim_IntList": reduce("Sum", dtype=(None,)),
    "aten.mean.dim": reduce("Mean", dtype=(None,)),
    "aten.amax.default": reduce("Max"),
    "aten.amin.default": reduce("Min"),
    "aten.max.dim": reduce("Max"),
    "aten.min.dim": reduce("Min"),
    "aten.argmax.default": reduce("ArgMax"),
    "aten.argmin.default": reduce("ArgMin"),
    "aten.var.dim": reduce("Var", unbiased=(True,)),
    "aten.var.correction": reduce("Var", correction=(None, 1)),
    "aten.linalg_vector_norm.default": reduce("Norm", ord=(2, 2.0), dtype=(None,)),
    "aten.norm.ScalarOpt_dim": reduce("Norm", p=(2, 2.0)),
    "aten.logsumexp.default": logsumexp,
    "aten.cross_entropy_loss.default": cross_entropy,
    "aten.cumsum.default": along("CumSum"),
    "aten.cummax.default": along("CumMax"),
    "aten.cummin.default": along("CumMin"),
    "aten.softmax.int": along("Softmax"),
    "aten._softmax.default": along("Softmax"),
    "aten.log_softmax.int": along("LogSoftmax"),
    "aten._log_softmax.default": along("LogSoftmax"),
    **{f"aten.{name}": view for name in VIEWS},
    "aten.expand.default": expand,
    "aten.permute.default": permute,
    "aten.transpose.int": transpose,
    "aten.t.default": transpose,
    "aten.slice.Tensor": narrow,
    "aten.select.int": select,
    "aten.split.Tensor": split,
    "aten.split_with_sizes.default": split,
    "aten.unbind.int": split,
    "aten.cat.default": join("Cat"),
    "aten.stack.default": join("Stack"),
    "aten.triu.default": triangle("Triu"),
    "aten.tril.default": triangle("Tril"),
}
# Calls that return their input's values unchanged: the output is the input's tensor, no node.
# calls that return their input (a cast to the dtype it has: Meta's RMSNorm's `.type_as(x)` in float32)
ALIASES = {
    "aten.alias.default",
    "aten.detach.default",
    "aten.lift_fresh_copy.default",
    "aten.contiguous.default",
    "aten.type_as.default",
}


def is_alias(s: Site) -> bool:
    x = s.t("self") if "self" in s.args else s.t("input")
    if x is None or len(s.out) != 1:
        return False
    same = s.tensors[x].dtype == s.tensors[s.out[0]].dtype and s.tensors[x].shape == s.out_shape()
    if s.target == "aten.clone.default":
        return same
    if s.target == "aten._to_copy.default":
        return same and s.args["self"].meta["val"].device == s.fx.meta["val"].device
    if s.target == "aten.dropout.default":
        return same and (s.args["p"] == 0 or not s.args["train"])
    return same and s.target in ALIASES


def registry_nodes(s: Site) -> Result:
    mapper = TABLE.get(s.target)
    return mapper(s) if mapper else "no registry operator computes it"
