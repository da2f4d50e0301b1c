"""The operator space: DRTriton's 61 operators plus ones real models use (Linear, RMSNorm, Exp,
Where, Hardswish, Mish), and capture-only operators that captured user programs need (CAPTURE_OPS, never drawn
unless named). Adding an operator is one line here (a family factory from families.py); a new family is one factory
there."""

from __future__ import annotations

import random
from dataclasses import replace

import drtriton_ray.ops.families as f
from drtriton_ray.ops.spec import OpSpec


def _u(lo: float, hi: float) -> float:
    return lambda rng: round(rng.uniform(lo, hi), 3)


def _param(**draws):
    return lambda rng: {k: d(rng) for k, d in draws.items()}


def _clamp_range(rng: random.Random) -> dict:
    return {"lo": round(rng.uniform(-1.5, -0.1), 3), "hi": round(rng.uniform(0.1, 1.5), 3)}


# Templates of the operators that exist in 1, 2 and 3 spatial dims (N, and KIND for pooling, filled in below).
CONV = "F.convNd({0}, {w0}, {w1}, stride={stride}, padding={padding}, dilation={dilation}, groups={groups})"
CONV_TRANSPOSE = (
    "F.conv_transposeNd({0}, {w0}, {w1}, stride={stride}, padding={padding}, "
    "output_padding={output_padding}, groups={groups}, dilation={dilation})"
)
POOL = "F.KIND_poolNd({0}, {kernel}, stride={stride}, padding={padding})"

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
    f.triangle("Triu", "torch.triu({0}, diagonal={diagonal})"),
    f.triangle("Tril", "torch.tril({0}, diagonal={diagonal})"),
    # reductions
    f.reduce("Sum", "torch.sum({0}, dim={dim}, keepdim={keepdim})"),
    f.reduce("Mean", "torch.mean({0}, dim={dim}, keepdim={keepdim})"),
    f.reduce("Max", "torch.amax({0}, dim={dim}, keepdim={keepdim})"),
    f.reduce("Min", "torch.amin({0}, dim={dim}, keepdim={keepdim})"),
    f.reduce("ArgMax", "torch.argmax({0}, dim={dim}, keepdim={keepdim})", out_kind="index"),
    f.reduce("ArgMin", "torch.argmin({0}, dim={dim}, keepdim={keepdim})", out_kind="index"),
    f.reduce("Var", "torch.var({0}, dim={dim}, keepdim={keepdim})", flops=3),
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


def _capture(spec: OpSpec) -> OpSpec:
    return replace(spec, synth=False)


# Operators of captured user programs (drtriton_ray/capture) that DRTriton's space lacks: scalar forms, more math,
# masks, views and slices. Synthesis skips them unless a config names them (OpSpec.synth); their params are what
# capture writes (a scalar `value` may be the string "float('-inf')"). The elementwise ones have samplers, so a
# config that names them gets programs.
CAPTURE_OPS = [
    *(
        _capture(f.unary(name, template, 1, _param(value=_u(-2.0, 2.0))))
        for name, template in [
            ("AddScalar", "{0} + {value}"),
            ("SubScalar", "{0} - {value}"),
            ("RSubScalar", "{value} - {0}"),
            ("MulScalar", "{0} * {value}"),
            ("DivScalar", "{0} / {value}"),
        ]
    ),
    _capture(f.unary("PowScalar", "torch.pow({0}, {exponent})", 8, lambda rng: {"exponent": rng.choice([2, 3])})),
    _capture(f.reduce("LogSumExp", "torch.logsumexp({0}, dim={dim}, keepdim={keepdim})", flops=4)),
    _capture(f.unary("Neg", "torch.neg({0})")),
    _capture(f.unary("Square", "torch.square({0})")),
    _capture(f.unary("Sqrt", "torch.sqrt({0})", 4)),
    _capture(f.unary("Rsqrt", "torch.rsqrt({0})", 4)),
    _capture(f.unary("Log", "torch.log({0})", 4)),
    _capture(f.unary("Reciprocal", "torch.reciprocal({0})", 4)),
    _capture(f.unary("Erf", "torch.erf({0})", 8)),
    _capture(f.unary("ClampMin", "torch.clamp({0}, min={lo})", 1, _param(lo=_u(-1.5, 0.0)))),
    _capture(f.unary("ClampMax", "torch.clamp({0}, max={hi})", 1, _param(hi=_u(0.0, 1.5)))),
    _capture(f.unary("GELUTanh", "F.gelu({0}, approximate='tanh')", 10)),
    _capture(f.nary("Pow", 2, "torch.pow({0}, {1})", flops=8)),
    f.capture_only("MaskedFill", 2, "torch.masked_fill({0}, {1}, {value})", "broadcast"),
    f.capture_only("WhereMask", 3, "torch.where({0}, {1}, {2})", "broadcast"),
    f.capture_only("LinearNoBias", 1, "F.linear({0}, {w0})", "matmul"),
    f.capture_only("View", 1, "{0}.reshape({shape})"),
    f.capture_only("Permute", 1, "{0}.permute({dims})"),
    f.capture_only("Expand", 1, "{0}.expand({shape})"),
    f.capture_only("Narrow", 1, "torch.narrow({0}, {dim}, {start}, {length})"),
    f.capture_only("Select", 1, "torch.select({0}, {dim}, {index})"),
]

REGISTRY: dict[str, OpSpec] = {op.name: op for op in DRTRITON_OPS + EXTRA_OPS + CAPTURE_OPS}
assert len(REGISTRY) == len(DRTRITON_OPS) + len(EXTRA_OPS) + len(CAPTURE_OPS), "duplicate operator name"
SYNTH_NAMES = [name for name, spec in REGISTRY.items() if spec.synth]  # the space `drtriton synth` draws from


def get_op(name: str) -> OpSpec:
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown operator {name!r}; known: {', '.join(sorted(REGISTRY))}") from None
