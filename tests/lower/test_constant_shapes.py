"""Constant shapes: the fused elementwise, strided-copy and triu kernels take their sizes and strides as
tl.constexpr (passed positionally), pooling its sizes, window, stride and padding (by keyword), the conv kernels
their sizes, strides, paddings, dilations and phase counts (by keyword), a fused anchor its broadcast leaves' dims
and strides (positionally). Against PyTorch in the Triton interpreter: short inner dims and broadcasts, both index
widths, non-contiguous views, pooling's unmasked inside blocks next to its masked edge blocks, strided, transposed
and grouped convs; and the generated source declares the sizes constexpr."""

import inspect
import re

import pytest
import test_lowering
import torch
import torch.nn.functional as F
import triton.language as tl
from test_lowering import _handmade, _import, _with_library, check_lowering, model_pair

from drtriton_ray.lower import kernels
from drtriton_ray.lower.elementwise import fused_kernel_source
from drtriton_ray.lower.emit import lower_program
from drtriton_ray.ir import Program

tiled = test_lowering.tiled  # the fixture: the interpreter's tiles, a GPU's, compiled on a GPU

# (a, b) of a broadcast a - b: short inner dims (rows of 7, of 1), both inputs broadcast, a (7, 75) x (81, 1) grid
BROADCASTS = [
    ((64, 1, 1, 7, 1), (64, 1, 7, 1)),
    ((7, 1, 1, 1, 75), (81, 1)),
    ((16, 9, 6), (9, 1)),
    ((3, 1, 5, 1, 2), (4, 2)),
]


def constexpr_params(fn) -> set[str]:
    """The parameters a kernel (jitted or the interpreter's) declares tl.constexpr."""
    sig = inspect.signature(fn.fn)
    return {name for name, p in sig.parameters.items() if p.annotation is tl.constexpr}


@pytest.mark.parametrize("a, b", BROADCASTS)
def test_broadcast_program_short_inner_dims(a, b, tmp_path):
    """A lowered a - b program: its kernel declares the coalesced dims and every stride constexpr; PyTorch's values."""
    shape = tuple(torch.broadcast_shapes(a, b))
    rec = _handmade([("Sub", [0, 1], 2, {}, [])], {0: a, 1: b, 2: shape}, [2])
    src = lower_program(Program.from_json(rec.dag), rec.source)
    declared = "d1: tl.constexpr, d2: tl.constexpr, d3: tl.constexpr, d4: tl.constexpr"
    assert declared in src and "s1_4: tl.constexpr" in src, src
    check_lowering(rec, tmp_path)


@pytest.mark.parametrize("a, b", BROADCASTS)
def test_broadcast_kernel_tiles_and_widths(a, b, tmp_path):
    """The fused kernel launched positionally as its wrapper does, columns over one or two dims, tiles wider than a
    row and of one column, int32 and int64 indices, b a non-contiguous view: a - b + c (c dense)."""
    from drtriton_ray.lower.wrappers import elementwise_args

    shape = tuple(torch.broadcast_shapes(a, b))
    torch.manual_seed(0)
    x, y, c = torch.randn(a), torch.randn(tuple(reversed(b))).permute(*reversed(range(len(b)))), torch.randn(shape)
    for columns in (1, 2):
        src = _with_library(fused_kernel_source("k_sub", [False, False, True], ["t3 = v0 - v1 + v2"], "t3", columns))
        mod = _import(src, tmp_path / f"ew_const_{columns}.py")
        assert {"d1", "d4", "s0_0", "s1_4"} <= constexpr_params(mod.k_sub)
        for block in (1024, 4 if c.numel() < 2000 else 128):  # the interpreter pays per program
            out, grid, args, meta = elementwise_args(
                shape, torch.float32, [False, False, True], x, y, c, config={"BLOCK": block}, columns=columns
            )
            for wide in (False, True):
                out.zero_()
                mod.k_sub[grid](*args, **{**meta, "WIDE": wide})
                assert torch.allclose(out, x - y + c), (columns, block, wide)


@pytest.mark.parametrize("shape", [(3, 37, 29), (2, 7, 1), (64, 7), (1, 1)])
def test_triangle_constant_sizes(shape):
    """triu/tril with H, W and the diagonal constant: PyTorch's values above, below and past the matrix."""
    from drtriton_ray.lower.wrappers import triangle

    assert {"H", "W", "diagonal"} <= constexpr_params(kernels.triangle_kernel)
    x = torch.randn(shape)
    for diagonal in (-3, 0, 2, 40):
        assert torch.equal(triangle(x, diagonal, True), torch.triu(x, diagonal)), diagonal
        assert torch.equal(triangle(x, diagonal, False), torch.tril(x, diagonal)), diagonal


def test_strided_copy_constant_strides():
    """The strided copy with its dims and both sides' strides constant: cat and stack slices with rows of 7 and 5,
    an expand (0 strides), a transpose, a select; every one under both index widths."""
    from drtriton_ray.lower.wrappers import cat, copy_setup, expand_copy, stack

    assert {"d1", "d4", "ss0", "ss4", "ds0", "ds4"} <= constexpr_params(kernels.strided_copy_kernel)
    torch.manual_seed(0)
    a, b = torch.randn(16, 7), torch.randn(16, 5)
    assert torch.equal(cat(a, b, -1), torch.cat([a, b], -1))
    assert torch.equal(stack(a, a * 2, 1), torch.stack([a, a * 2], 1))
    x = torch.randn(64, 1, 7)
    assert torch.equal(expand_copy(x, (64, 512, 7)), x.expand(64, 512, 7))
    views = [torch.randn(37, 53).t(), torch.randn(5, 1, 7).expand(5, 9, 7), torch.randn(4, 6, 7).select(1, 2)]
    for view in views:
        dst = torch.empty(view.shape)
        grid, args, meta = copy_setup(view, dst)
        for wide in (False, True):
            dst.zero_()
            kernels.strided_copy_kernel[grid](view, *args, **{**meta, "WIDE": wide})
            assert torch.equal(dst, view), (view.shape, wide)


# name: (nodes, shapes, outputs, weights) of one fused anchor (lower/fuse.py) with a broadcast leaf
BROADCAST_FUSED = {
    "softmax-both-sides": (  # along_dim_kernel (dim 1 of three): a (6, 1) prologue leaf, a (4, 1, 5) epilogue leaf
        [("Mul", [0, 1], 2, {}, []), ("Softmax", [2], 3, {"dim": 1}, []), ("Add", [3, 4], 5, {}, [])],
        {0: (4, 6, 5), 1: (6, 1), 2: (4, 6, 5), 3: (4, 6, 5), 4: (4, 1, 5), 5: (4, 6, 5)},
        [5],
        (),
    ),
    "sum-prologue": (  # reduce_kernel: a per-channel scale
        [("Mul", [0, 1], 2, {}, []), ("Sum", [2], 3, {"dim": 1, "keepdim": False}, [])],
        {0: (2, 3, 4, 5), 1: (3, 1, 1), 2: (2, 3, 4, 5), 3: (2, 4, 5)},
        [3],
        (),
    ),
    "layer-norm-prologue": (  # row_norm_kernel: a per-row shift, read once per pass over the rows
        [("Add", [0, 1], 2, {}, []), ("LayerNorm", [2], 3, {"k": 1}, [4, 5])],
        {0: (3, 4, 10), 1: (4, 1), 2: (3, 4, 10), 3: (3, 4, 10), 4: (10,), 5: (10,)},
        [3],
        (4, 5),
    ),
    "conv-bias-epilogue": (  # a conv's bias-like (C, 1, 1) leaf
        [
            ("Conv2d", [0], 1, {"stride": 1, "padding": 1, "dilation": 1, "groups": 1}, [2, 3]),
            ("Add", [1, 4], 5, {}, []),
        ],
        {0: (2, 3, 6, 7), 1: (2, 5, 6, 7), 2: (5, 3, 3, 3), 3: (5,), 4: (5, 1, 1), 5: (2, 5, 6, 7)},
        [5],
        (2, 3),
    ),
    "pool-epilogue": (  # pool_rows_kernel (its own constexprs by keyword): a per-channel scale
        [("AvgPool1d", [0], 1, {"kernel": 3, "stride": 1, "padding": 1}, []), ("Mul", [1, 2], 3, {}, [])],
        {0: (2, 3, 20), 1: (2, 3, 20), 2: (3, 1), 3: (2, 3, 20)},
        [3],
        (),
    ),
}


@pytest.mark.parametrize("name", sorted(BROADCAST_FUSED))
def test_fused_broadcast_leaf_constant_dims(name, tmp_path):
    """A fused anchor reading a broadcast leaf declares that side's dims (pd1..pd4 before the anchor, ed1..ed4
    after) and the leaf's strides constexpr, still passed positionally after the kernel's own arguments; PyTorch's
    values, and where the kernel indexes in int32 or int64 (WIDE), under both."""
    nodes, shapes, outputs, weights = BROADCAST_FUSED[name]
    rec = _handmade(nodes, shapes, outputs, weights)
    src = lower_program(Program.from_json(rec.dag), rec.source)
    mod = _import(src, tmp_path / f"fused_{name.replace('-', '_')}.py")
    declared = constexpr_params(mod.fused_0_kernel)
    sides = [prefix for prefix, node in (("p", nodes[0]), ("e", nodes[-1])) if node[0] in ("Mul", "Add")]
    for prefix in sides:
        assert {f"{prefix}d{j}" for j in range(1, 5)} <= declared, (prefix, sorted(declared))
    strides = {a for a in mod.fused_0_kernel.arg_names if re.fullmatch(r"s\d+_\d", a)}
    assert len(strides) == 5 * len(sides) and strides <= declared, sorted(declared)
    check_lowering(rec, tmp_path)
    if "leaf_wide(" not in src:  # the anchor's index is int64 whatever the sizes
        return
    model, new, inputs = model_pair(rec.source, mod)
    for wide in (False, True):
        mod.leaf_wide = lambda meta, *leaves, wide=wide: {**meta, "WIDE": wide}
        with torch.no_grad():
            torch.testing.assert_close(new(*inputs), model(*inputs), atol=1e-4, rtol=1e-4)


def test_leaf_wide():
    """A fused kernel indexes in int64 where a broadcast leaf's offsets reach 2^31 (a view into a larger tensor):
    its strides are constants, and a constant past int32 times an int32 index does not compile."""
    from drtriton_ray.lower.wrappers import leaf_wide

    small, big = torch.empty(64, 1, device="meta"), torch.empty(2**31 + 64, device="meta")[:: 2**25].view(65, 1)
    assert leaf_wide({"WIDE": False}, small) == {"WIDE": False}
    assert leaf_wide({"WIDE": False}, small, big) == {"WIDE": True}
    assert leaf_wide({"WIDE": True}, small) == {"WIDE": True}


@pytest.mark.parametrize("shape, mode, groups", [((4, 6, 5, 7), 2, 3), ((3, 4, 33), 0, 1), ((2, 5, 9), 3, 1)])
def test_row_norm_constant_sizes(tiled, shape, mode, groups):
    """row_norm_kernel's sizes (row length, positions, channels a group, groups) are constants by keyword, its row
    count an argument by keyword (a new token count compiles nothing): group, layer and instance norm against
    PyTorch, both index widths."""
    assert {"L", "S", "CPG", "G", "WIDE"} <= constexpr_params(kernels.row_norm_kernel)
    assert "n_rows" not in constexpr_params(kernels.row_norm_kernel)
    torch.manual_seed(0)
    x = torch.randn(shape)
    c = shape[1] if mode == 2 else shape[-1]
    w, b = 1 + 0.1 * torch.randn(c), 0.1 * torch.randn(c)
    want = {
        2: lambda: F.group_norm(x, groups, w, b),
        0: lambda: F.layer_norm(x, (c,), w, b),
        3: lambda: F.instance_norm(x),
    }[mode]()
    weight, bias = (None, None) if mode == 3 else (w, b)
    out, grid, args, meta = tiled.row_norm_setup(x.shape, x, weight, bias, mode, groups)
    assert not meta["WIDE"] and meta["L"] * meta["n_rows"] == x.numel()
    for wide in (False, True):
        out.zero_()
        kernels.row_norm_kernel[grid](
            x, *args, MODE=mode, HAS_W=weight is not None, HAS_B=bias is not None, **{**meta, "WIDE": wide}
        )
        torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)


# (spatial dims, transposed, groups, in channels, out channels, size, kernel, stride, padding, dilation) as
# test_lowering.torch_conv takes them
CONST_CONVS = [
    (2, False, 1, 3, 5, (9, 7), 3, 2, 1, 1),  # strided and padded conv2d, odd sizes
    (1, True, 1, 4, 6, 11, 5, 3, 2, 2),  # transposed conv1d: stride 3, dilation 2, output_padding 2
    (2, False, 2, 4, 6, (6, 5), 3, 1, 1, 1),  # grouped
]
CONV_SIZES = {"N", "C", "D", "H", "W", "CO", "OW", "CIN_G", "COUT_G", "KW", "SW", "PW", "DW", "QW", "RW", "JW", "TW"}


@pytest.mark.parametrize("case", CONST_CONVS, ids=["conv2d-strided", "convT1d", "conv2d-grouped"])
def test_conv_constant_sizes(tiled, case):
    """conv_kernel and conv_small_kernel take sizes, strides, paddings, dilations and the phase counts as constants
    by keyword (the setups' launch constants, no sizes among the positional arguments): PyTorch's values, the
    implicit GEMM under int32 and int64 index math (WIDE), the rank-1 kernel (int32 positions) too."""
    for kernel in (kernels.conv_kernel, kernels.conv_small_kernel):
        assert CONV_SIZES | {"IW"} <= constexpr_params(kernel), kernel
    torch.manual_seed(0)
    x, w, b, want = test_lowering.torch_conv(case)
    _, transposed, groups, _, _, _, _, stride, padding, dilation = case
    conv = (x, w, b, tuple(want.shape), stride, padding, dilation, groups, transposed)
    out, grid, args, meta = tiled.conv_setup(*conv)
    assert len(args) == 3 and CONV_SIZES <= set(meta), sorted(meta)  # weight, bias, out
    for wide in (False, True):
        out.zero_()
        kernels.conv_kernel[grid](x, *args, TRANSPOSED=transposed, **{**meta, "WIDE": wide})
        torch.testing.assert_close(out, want, atol=1e-4, rtol=1e-4)
    out, grid, args, meta = tiled.conv_small_setup(*conv)
    kernels.conv_small_kernel[grid](x, *args, TRANSPOSED=transposed, **meta)
    torch.testing.assert_close(out, want, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(
    "shape, dims", [((3, 37, 29), (0, 2, 1)), ((2, 5, 6, 7), (0, 2, 3, 1)), ((7, 3, 40), (2, 0, 1))]
)
def test_transpose_tile_constant_sizes(tiled, shape, dims):
    """transpose_tile_kernel's sizes and both sides' strides are constants by keyword: PyTorch's permutes, both
    index widths."""
    sizes = {"A", "C", "B1", "B2", "sa", "sc", "sb0", "sb1", "sb2", "da", "dc", "db0", "db1", "db2"}
    assert sizes <= constexpr_params(kernels.transpose_tile_kernel)
    x = torch.randn(shape)
    out, grid, args, meta = tiled.permute_setup(x, dims)
    assert args == (out,) and sizes <= set(meta)
    for wide in (False, True):
        out.zero_()
        kernels.transpose_tile_kernel[grid](x, *args, **{**meta, "WIDE": wide})
        assert torch.equal(out, x.permute(dims)), wide
