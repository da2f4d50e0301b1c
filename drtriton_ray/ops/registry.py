"""The operator space: DRTriton's 61 operators plus ones real models use (Linear, RMSNorm, Exp,
Where, Hardswish, Mish), and the ones captured user programs need (CAPTURE_OPS). Synthesis draws every one. Adding
an operator is one line here (a family factory from families.py); a new family is one factory there."""

from __future__ import annotations

import random
from collections.abc import Callable

import drtriton_ray.ops.families as f
from drtriton_ray.ops.spec import OpSpec


def _u(lo: float, hi: float) -> float:
    return lambda rng: round(rng.uniform(lo, hi), 3)


def _param(**draws):
    return lambda rng: {k: d(rng) for k, d in draws.items()}


def _nonzero(lo: float, hi: float) -> Callable[[random.Random], float]:
    """A magnitude in [lo, hi] of either sign: a divisor or factor away from 0."""
    return lambda rng: rng.choice((-1, 1)) * round(rng.uniform(lo, hi), 3)


def _clamp_range(rng: random.Random) -> dict:
    return {"lo": round(rng.uniform(-1.5, -0.1), 3), "hi": round(rng.uniform(0.1, 1.5), 3)}


# Templates of the operators that exist in 1, 2 and 3 spatial dims (N, and KIND for pooling, filled in below), and
# of the reductions over one dim.
CONV = "F.convNd({0}, {w0}, {w1}, stride={stride}, padding={padding}, dilation={dilation}, groups={groups})"
CONV_TRANSPOSE = (
    "F.conv_transposeNd({0}, {w0}, {w1}, stride={stride}, padding={padding}, "
    "output_padding={output_padding}, groups={groups}, dilation={dilation})"
)
POOL = "F.KIND_poolNd({0}, {kernel}, stride={stride}, padding={padding})"
REDUCE = "torch.FN({0}, dim={dim}, keepdim={keepdim})"  # FN: the reduction's torch function

DRTRITON_OPS = [
    # binary / ternary elementwise with broadcasting
    f.nary("Add", 2, "{0} + {1}"),
    f.nary("Sub", 2, "{0} - {1}"),
    f.nary("Mul", 2, "{0} * {1}"),
    f.nary("Div", 2, "{0} / {1}"),
    f.nary("Maximum", 2, "torch.maximum({0}, {1})"),
    f.nary("Minimum", 2, "torch.minimum({0}, {1})"),
    f.nary("Lerp", 3, "torch.lerp({0}, {1}, {2})", flops=3),
    # contractions and convolutions
    f.matmul("Matmul", "torch.matmul({0}, {1})"),
    f.bmm("Bmm", "torch.bmm({0}, {1})"),
    *(f.conv(f"Conv{n}d", CONV.replace("N", str(n)), n) for n in (1, 2, 3)),
    *(f.conv_transpose(f"ConvTranspose{n}d", CONV_TRANSPOSE.replace("N", str(n)), n) for n in (1, 2, 3)),
    # layout
    f.cat("Cat", "torch.cat([{0}, {1}], dim={dim})"),
    f.stack("Stack", "torch.stack([{0}, {1}], dim={dim})"),
    f.transpose("Transpose", "torch.transpose({0}, {dim0}, {dim1})"),
    *(f.triangle(name, f"torch.{name.lower()}({{0}}, diagonal={{diagonal}})") for name in ("Triu", "Tril")),
    # reductions
    *(f.reduce(name, REDUCE.replace("FN", fn)) for name, fn in (("Sum", "sum"), ("Mean", "mean"))),
    *(f.reduce(name, REDUCE.replace("FN", fn)) for name, fn in (("Max", "amax"), ("Min", "amin"))),
    *(f.reduce(name, REDUCE.replace("FN", name.lower()), out_kind="index") for name in ("ArgMax", "ArgMin")),
    f.reduce("Var", REDUCE.replace("FN", "var"), flops=3),
    f.reduce("Norm", "torch.norm({0}, p=2, dim={dim}, keepdim={keepdim})", flops=2),
    # scans and softmax family
    f.along_dim("CumSum", "torch.cumsum({0}, dim={dim})"),
    f.along_dim("CumMax", "torch.cummax({0}, dim={dim}).values"),
    f.along_dim("CumMin", "torch.cummin({0}, dim={dim}).values"),
    f.along_dim("Softmax", "torch.softmax({0}, dim={dim})", flops=5, family="softmax"),
    f.along_dim("LogSoftmax", "torch.log_softmax({0}, dim={dim})", flops=5, family="softmax"),
    # activations and math
    f.unary("ReLU", "torch.relu({0})"),
    f.unary("LeakyReLU", "F.leaky_relu({0}, negative_slope={negative_slope})", 2, _param(negative_slope=_u(0.01, 0.3))),
    f.unary("Sigmoid", "torch.sigmoid({0})", 4),
    f.unary("Tanh", "torch.tanh({0})", 5),
    f.unary("Swish", "F.silu({0})", 5),
    f.unary("GELU", "F.gelu({0})", 8),
    f.unary("SELU", "F.selu({0})", 4),
    f.unary("ELU", "F.elu({0}, alpha={alpha})", 4, _param(alpha=_u(0.5, 1.5))),
    f.unary("Hardsigmoid", "F.hardsigmoid({0})", 3),
    f.unary("HardTanh", "F.hardtanh({0}, min_val={lo}, max_val={hi})", 2, _clamp_range),
    f.unary("Softplus", "F.softplus({0})", 4),
    f.unary("Softsign", "F.softsign({0})", 3),
    f.unary("LogSigmoid", "F.logsigmoid({0})", 5),
    f.unary("Clamp", "torch.clamp({0}, min={lo}, max={hi})", 2, _clamp_range),
    f.unary("Abs", "torch.abs({0})"),
    f.unary("Cos", "torch.cos({0})", 4),
    f.unary("Sin", "torch.sin({0})", 4),
    f.unary("Exp2", "torch.exp2({0})", 4),
    # normalisations
    f.batch_norm("BatchNorm", "F.batch_norm({0}, None, None, {w0}, {w1}, training=True)"),
    f.last_dims_norm("LayerNorm", "F.layer_norm({0}, {0}.shape[-{k}:], {w0}, {w1})"),
    f.group_norm("GroupNorm", "F.group_norm({0}, {num_groups}, {w0}, {w1})"),
    f.instance_norm("InstanceNorm", "F.instance_norm({0})"),
    # pooling
    # PyTorch's CPU avg_pool3d has no half kernels, and every program must validate on CPU too.
    *(
        f.pool(
            f"{kind.title()}Pool{n}d",
            POOL.replace("KIND", kind).replace("N", str(n)),
            n,
            **({"dtypes": ("float32",)} if (kind, n) == ("avg", 3) else {}),
        )
        for kind in ("avg", "max")
        for n in (1, 2, 3)
    ),
]

EXTRA_OPS = [
    f.linear("Linear", "F.linear({0}, {w0}, {w1})"),
    f.last_dims_norm("RMSNorm", "F.rms_norm({0}, {0}.shape[-{k}:], {w0})", bias=False),
    f.unary("Exp", "torch.exp({0})", 4),
    f.unary("Hardswish", "F.hardswish({0})", 4),
    f.unary("Mish", "F.mish({0})", 8),
    f.nary("Where", 3, "torch.where({0} > 0, {1}, {2})", flops=2),
]


# Operators of captured user programs (drtriton_ray/capture) that DRTriton's space lacks: scalar forms, more math,
# masks, views, slices, the cross-entropy loss, dtype casts (mixed precision). Their params are what capture writes (a
# scalar `value` may be the string "float('-inf')"); the samplers draw what synthesis uses. Capture maps x ** 2, 0.5,
# -0.5, -1 to Square, Sqrt, Rsqrt, Reciprocal: PowScalar draws the other exponents real code uses, fractional and
# negative ones on a positive input.
CAPTURE_OPS = [
    *(
        f.unary(name, template, 1, _param(value=draw))
        for name, template, draw in [
            ("AddScalar", "{0} + {value}", _u(-2.0, 2.0)),
            ("SubScalar", "{0} - {value}", _u(-2.0, 2.0)),
            ("RSubScalar", "{value} - {0}", _u(-2.0, 2.0)),
            ("MulScalar", "{0} * {value}", _nonzero(0.25, 2.0)),
            ("DivScalar", "{0} / {value}", _nonzero(0.25, 2.0)),
        ]
    ),
    f.unary(
        "PowScalar",
        "torch.pow({0}, {exponent})",
        8,
        lambda rng: {"exponent": rng.choice([-1.5, 0.25, 0.75, 1.5, 2.5, 3])},
        domain="positive",
    ),
    f.reduce("LogSumExp", REDUCE.replace("FN", "logsumexp"), flops=4),
    f.unary("Neg", "torch.neg({0})"),
    f.unary("Square", "torch.square({0})"),
    f.unary("Sqrt", "torch.sqrt({0})", 4, domain="positive"),
    f.unary("Rsqrt", "torch.rsqrt({0})", 4, domain="positive"),
    f.unary("Log", "torch.log({0})", 4, domain="positive"),
    f.unary("Reciprocal", "torch.reciprocal({0})", 4, domain="positive"),
    f.unary("Erf", "torch.erf({0})", 8),
    f.unary("ClampMin", "torch.clamp({0}, min={lo})", 1, _param(lo=_u(-1.5, 0.0))),
    f.unary("ClampMax", "torch.clamp({0}, max={hi})", 1, _param(hi=_u(0.0, 1.5))),
    f.unary("GELUTanh", "F.gelu({0}, approximate='tanh')", 10),
    f.nary("Pow", 2, "torch.pow({0}, {1})", flops=8, domains=("positive", "bounded")),
    f.nary(
        "MaskedFill",
        2,
        "torch.masked_fill({0}, {1}, {value})",
        sample=_param(value=_u(-2.0, 2.0)),
        domains=("real", "mask"),
    ),
    f.nary("WhereMask", 3, "torch.where({0}, {1}, {2})", domains=("mask", "real", "real")),
    f.linear("LinearNoBias", "F.linear({0}, {w0})", bias=False),
    f.view("View", "{0}.reshape({shape})"),
    f.permute("Permute", "{0}.permute({dims})"),
    f.expand("Expand", "{0}.expand({shape})"),
    f.narrow("Narrow", "torch.narrow({0}, {dim}, {start}, {length})"),
    f.select("Select", "torch.select({0}, {dim}, {index})"),
    f.cast("Cast", "{0}.to(torch.{dtype})"),
    f.cross_entropy("CrossEntropy", "F.cross_entropy({0}, {1}, ignore_index={ignore_index}, reduction='{reduction}')"),
]

REGISTRY: dict[str, OpSpec] = {op.name: op for op in DRTRITON_OPS + EXTRA_OPS + CAPTURE_OPS}
assert len(REGISTRY) == len(DRTRITON_OPS) + len(EXTRA_OPS) + len(CAPTURE_OPS), "duplicate operator name"
SYNTH_NAMES = list(REGISTRY)  # the space `drtriton synth` draws from: every operator


def get_op(name: str) -> OpSpec:
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown operator {name!r}; known: {', '.join(sorted(REGISTRY))}") from None
