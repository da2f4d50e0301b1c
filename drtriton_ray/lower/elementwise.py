"""Elementwise operators as Triton expressions, and the generated kernel that fuses a group of
them: every leaf input is loaded through its broadcast strides against the group's output
shape, so a whole broadcasting elementwise sub-DAG with one sink becomes one kernel."""

from __future__ import annotations


def _series(x: str, coefficients: tuple[float, ...]) -> str:
    """c0 + c1 x + c2 x^2 + ... in Horner form."""
    out = repr(coefficients[-1])
    for c in reversed(coefficients[:-1]):
        out = f"{c!r} + {x} * ({out})"
    return out


# Triton expressions over float32 values {0}, {1}, {2} and the op's params, after PyTorch's own formulas.
# Near zero, PyTorch's tanh, expm1 (ELU, SELU) and log1p (softplus, log-sigmoid) keep full relative precision;
# the naive 2 sigmoid(2x) - 1, exp(x) - 1 and log(1 + u) lose it to cancellation (tanh(3e-7) came out 2.4e-7),
# and a later division or softmax blows that up. Below a threshold a Taylor series (error < 1e-7) takes over.
_TANH = (
    "tl.where(tl.abs({0}) < 0.25, {0} * ("
    + _series("{0} * {0}", (1.0, -1 / 3, 2 / 15, -17 / 315, 62 / 2835))
    + "), 2.0 * tl.sigmoid(2.0 * {0}) - 1.0)"
)
_EXPM1 = (
    "tl.where(tl.abs({0}) < 0.25, {0} * ("
    + _series("{0}", (1.0, 1 / 2, 1 / 6, 1 / 24, 1 / 120, 1 / 720))
    + "), tl.exp({0}) - 1.0)"
)
_U = "tl.exp(-tl.abs({0}))"  # log1p(exp(-|x|)), the term softplus and log-sigmoid share
_LOG1P_U = (
    f"tl.where({_U} < 0.0625, {_U} * ("
    + _series(_U, (1.0, -1 / 2, 1 / 3, -1 / 4, 1 / 5, -1 / 6))
    + f"), tl.log(1.0 + {_U}))"
)


def _pow(x: str, e: str) -> str:
    """x ** e as PyTorch: |x| ** e by exp2/log2, negative x only to integer powers (odd ones negative, others
    NaN), anything ** 0 = 1."""
    mag = f"tl.exp2({e} * tl.log2(tl.abs({x})))"
    signed = f"tl.where({e} - 2.0 * tl.floor({e} * 0.5) == 1.0, -{mag}, {mag})"
    negative = f"tl.where(tl.floor({e}) == {e}, {signed}, float('nan'))"
    return f"tl.where({e} == 0.0, 1.0, tl.where({x} < 0.0, {negative}, {mag}))"


# mish: tanh(softplus(x)) = n (n + 2) / (n (n + 2) + 2) with n = e^x, a ratio of positive terms
_N = "tl.exp(tl.minimum({0}, 20.0))"
EXPRESSIONS: dict[str, str] = {
    "Add": "{0} + {1}",
    "Sub": "{0} - {1}",
    "Mul": "{0} * {1}",
    "Div": "{0} / {1}",
    "Maximum": "tl.maximum({0}, {1})",
    "Minimum": "tl.minimum({0}, {1})",
    # lerp from the nearer end, as PyTorch (weight >= 0.5: end + (weight - 1) * (end - start)): from start, a
    # result near 0 at weight ~1 is what cancellation leaves and has lost most of its digits
    "Lerp": "tl.where(tl.abs({2}) < 0.5, {0}, {1}) + tl.where(tl.abs({2}) < 0.5, {2}, {2} - 1.0) * ({1} - {0})",
    "Where": "tl.where({0} > 0.0, {1}, {2})",
    "ReLU": "tl.maximum({0}, 0.0)",
    "LeakyReLU": "tl.where({0} >= 0.0, {0}, {0} * {negative_slope})",
    "Sigmoid": "tl.sigmoid({0})",
    "Tanh": _TANH,
    "Swish": "{0} * tl.sigmoid({0})",
    "GELU": "0.5 * {0} * (1.0 + tl.erf({0} * 0.7071067811865476))",
    "SELU": "1.0507009873554805 * tl.where({0} > 0.0, {0}, 1.6732632423543772 * " + _EXPM1 + ")",
    "ELU": "tl.where({0} > 0.0, {0}, {alpha} * " + _EXPM1 + ")",
    "Hardsigmoid": "tl.minimum(tl.maximum({0} / 6.0 + 0.5, 0.0), 1.0)",
    "HardTanh": "tl.minimum(tl.maximum({0}, {lo}), {hi})",
    "Clamp": "tl.minimum(tl.maximum({0}, {lo}), {hi})",
    "Softplus": "tl.maximum({0}, 0.0) + " + _LOG1P_U,  # = F.softplus, its identity above 20 included
    "Softsign": "{0} / (1.0 + tl.abs({0}))",
    "LogSigmoid": "(tl.minimum({0}, 0.0) - " + _LOG1P_U + ")",
    "Abs": "tl.abs({0})",
    "Cos": "tl.cos({0})",
    "Sin": "tl.sin({0})",
    "Exp2": "tl.exp2({0})",
    "Exp": "tl.exp({0})",
    "Hardswish": "{0} * tl.minimum(tl.maximum({0} + 3.0, 0.0), 6.0) / 6.0",
    "Mish": "{0} * (" + _N + " * (" + _N + " + 2.0) / (" + _N + " * (" + _N + " + 2.0) + 2.0))",
    # capture-only operators (ops/registry.py:CAPTURE_OPS); a scalar is a literal, "float('-inf')" included
    "AddScalar": "{0} + {value}",
    "SubScalar": "{0} - {value}",
    "RSubScalar": "{value} - {0}",
    "MulScalar": "{0} * {value}",
    "DivScalar": "{0} / {value}",
    "Neg": "-{0}",
    "Square": "{0} * {0}",
    "Sqrt": "tl.sqrt_rn({0})",  # IEEE-rounded, as PyTorch's (tl.sqrt may be the approximate instruction)
    "Rsqrt": "1.0 / tl.sqrt_rn({0})",
    "Log": "tl.log({0})",
    "Reciprocal": "1.0 / {0}",
    "Erf": "tl.erf({0})",
    "ClampMin": "tl.maximum({0}, {lo})",
    "ClampMax": "tl.minimum({0}, {hi})",
    "GELUTanh": "0.5 * {0} * (1.0 + "
    + _TANH.replace("{0}", "(0.7978845608028654 * ({0} + 0.044715 * {0} * {0} * {0}))")
    + ")",
    "Pow": _pow("{0}", "{1}"),
    "PowScalar": _pow("{0}", "(tl.zeros_like({0}) + {exponent})"),
    "MaskedFill": "tl.where({1} != 0.0, {value}, {0})",  # the boolean mask loads as 0.0 / 1.0
    "WhereMask": "tl.where({0} != 0.0, {1}, {2})",
}


# A kernel holds every value as float32; a value of a narrower dtype is its float32 rounded to that dtype, as PyTorch
# rounds it (round_bf16: the interpreter's own bfloat16 conversion truncates). float32 and float64 values stay float32.
ROUNDING = {"bfloat16": "round_bf16({})", "float16": "{}.to(tl.float16).to(tl.float32)"}


def cast_expression(x: str, source: str, target: str) -> str:
    """A Cast from dtype `source` to `target` of the value x: rounded to the source dtype (an elementwise value fused
    before the cast is computed unrounded in float32, PyTorch's tensor of the source dtype held it rounded), then to
    the target: both roundings PyTorch's `.to` makes, where they are not exact in float32."""
    for dtype in dict.fromkeys((source, target)):
        x = ROUNDING.get(dtype, "{}").format(x)
    return x


def is_elementwise(op: str) -> bool:
    return op in EXPRESSIONS or op == "Cast"


def expression(op: str, args: list[str], params: dict, dtypes: list[str] = ()) -> str:
    """An elementwise node's Triton expression over its inputs' values `args`; `dtypes`: its inputs' dtypes (a
    Cast's rounding depends on its source's)."""
    if op == "Cast":
        return cast_expression(args[0], dtypes[0], params["dtype"])
    return EXPRESSIONS[op].format(*args, **params)


def fused_kernel_source(
    name: str, dense: list[bool], body: list[str], result: str, columns: int = 1, runtime_n: bool = False
) -> str:
    """A kernel over the output. With dense inputs only (the output's shape, passed contiguous) it walks the flat
    index, BLOCK at a time. With a broadcast input k it walks tiles of rows x columns of the output viewed over the
    coalesced dims (d0, d1, d2, d3, d4) (the wrapper merges what it can, `coalesced_dims`): input k's offset is its
    strides s{k}_0..s{k}_4 over the row's and the column's indices, so the divisions happen once a row and once a
    column, not per element, where they can cost more than the memory traffic of a memory-bound kernel. The columns
    are d4, or with `columns` 2 the two innermost dims (d3, d4): where d4 is short (a (8192, 8192, 7) output), rows
    of d4 values leave most of a tile's lanes idle and its stores short. A leaf that does not vary along the columns
    loads once a row (leaf_tile); one that steps through (d3, d4) as through one dim is read at the column times its
    stride (col_offset), so a contiguous one loads as 16-byte vectors. WIDE (indices or offsets that reach 2^31)
    computes indices in int64, int32 otherwise.

    The element count, dims and strides are tl.constexpr, passed positionally as before: a generated module runs one
    program of fixed shapes, so they cost one compile per shape, and divisions by them become multiplies and shifts,
    a 0 stride drops its term, known strides and row lengths let the compiler prove loads and stores aligned, and a
    tile's masks fold away where the tiles fit the output exactly (tile_block). A dense kernel's mask `offs < n` is
    uniform over runs of as many values as n's largest power-of-two divisor (up to 4): n a runtime argument not
    divisible by 16 gave 4-byte loads and stores (an H200: Exp over 536,918,382 values at half torch.compile's
    speed), a constant n even by 2 gives 8-byte ones, by 4 16-byte ones (bench/sm90_asm.py). `runtime_n`: a dense
    kernel whose count varies with the program's sizes and is a multiple of 16 at every size (tokens x a hidden size
    of 16k) takes n as an argument: Triton specializes it as divisible by 16, so its loads stay 16-byte ones, and a
    new token count runs the same compiled kernel."""
    ptrs = ", ".join(f"in{k}_ptr" for k in range(len(dense)))
    broadcast = [k for k, d in enumerate(dense) if not d]
    if not broadcast:
        head = [
            f"def {name}(out_ptr, {ptrs}, n{'' if runtime_n else ': tl.constexpr'}, BLOCK: tl.constexpr, "
            "WIDE: tl.constexpr):",
            "    offs, mask = flat_block(n, BLOCK, WIDE)",
        ]
    else:
        strides = [", ".join(f"s{k}_{j}: tl.constexpr" for j in range(5)) + "," for k in broadcast]
        head = [
            f"def {name}(",
            f"    out_ptr, {ptrs}, n: tl.constexpr,",
            "    d1: tl.constexpr, d2: tl.constexpr, d3: tl.constexpr, d4: tl.constexpr,",
            *(f"    {line}" for line in strides),
            "    BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr, WIDE: tl.constexpr,",
            "):",
            "    # dims and strides are constants (the program's shapes are fixed): no division by a runtime value",
        ]
        if columns == 2:
            head += [
                "    # rows over (d0, d1, d2), columns over (d3, d4): d4 is short, a row holds many runs of it",
                "    rows, cols, row_mask, col_mask = tile_block(n // (d3 * d4), d3 * d4, BLOCK_R, BLOCK_C, WIDE)",
                "    i0, i1, i2 = rows // (d2 * d1), rows // d2 % d1, rows % d2",
                "    offs, mask = rows[:, None] * (d3 * d4) + cols[None, :], row_mask[:, None] & col_mask[None, :]",
            ]
        else:
            head += [
                "    rows, cols, row_mask, col_mask = tile_block(n // d4, d4, BLOCK_R, BLOCK_C, WIDE)",
                "    i0, i1, i2, i3 = unravel4(rows, d1, d2, d3)",
                "    offs, mask = rows[:, None] * d4 + cols[None, :], row_mask[:, None] & col_mask[None, :]",
            ]
    lines = ["@triton.jit", *head]
    for k, d in enumerate(dense):
        if d:
            lines.append(f"    v{k} = tl.load(in{k}_ptr + offs, mask=mask, other=0.0).to(tl.float32)")
            continue
        if columns == 2:
            row, col = f"i0 * s{k}_0 + i1 * s{k}_1 + i2 * s{k}_2", f"col_offset(cols, d4, s{k}_3, s{k}_4)"
            varies = f"s{k}_3 + s{k}_4"
        else:
            row, col = f"i0 * s{k}_0 + i1 * s{k}_1 + i2 * s{k}_2 + i3 * s{k}_3", f"cols * s{k}_4"
            varies = f"s{k}_4"
        lines.append(f"    v{k} = leaf_tile(in{k}_ptr, {row}, {col}, row_mask, col_mask, {varies})")
    lines += [f"    {line}" for line in body]
    lines.append(f"    tl.store(out_ptr + offs, ({result}).to(out_ptr.dtype.element_ty), mask=mask)")
    return "\n".join(lines) + "\n"
