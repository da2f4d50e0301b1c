"""pool_rows_kernel: max and average pooling by output rows (n*c, od, oh) x blocks along W, against PyTorch in the
Triton interpreter under the interpreter's and a GPU's tiles (and compiled on a GPU where there is one)."""

import pytest
import torch
import torch.nn.functional as F
import test_lowering
from test_lowering import _handmade, check_lowering

from drtriton_ray.lower import kernels, tuning
from drtriton_ray.lower.emit import lower_program
from drtriton_ray.ir import Program

tiled = test_lowering.tiled  # the fixture: the interpreter's tiles, a GPU's, compiled on a GPU

# (shape, kernel, stride, padding): windows without overlap (k = s), overlapping ones (s < k, s = 1), padding up to
# k / 2, a long window, rows longer than a GPU's 128-wide block, many short rows (several a program)
POOLS = [
    ((2, 3, 50), 2, 2, 0),
    ((2, 3, 50), 3, 1, 1),
    ((3, 2, 300), 5, 3, 2),
    ((2, 2, 40), 15, 4, 7),
    ((64, 30, 6), 3, 2, 1),
    ((2, 3, 17, 23), 2, 2, 0),
    ((2, 3, 17, 23), 4, 3, 2),
    ((1, 2, 5, 300), 3, 1, 1),
    ((2, 3, 9, 8, 7), 3, 2, 1),
    ((2, 3, 9, 8, 7), 2, 1, 0),
    ((1, 2, 6, 7, 130), 4, 4, 2),
    # rows longer than a GPU tile's 128 outputs: blocks inside the rows (unmasked taps) next to edge blocks
    # (masked); 2-d and 3-d with padding rows (clamped, dropped), rows past the last
    ((2, 3, 700), 15, 1, 7),
    ((1, 3, 300), 4, 1, 0),
    ((2, 2, 5, 300), 3, 1, 1),
    ((1, 2, 3, 4, 290), 3, 1, 1),
    ((1, 3, 7, 520), 3, 2, 1),
]


@pytest.mark.parametrize("shape, k, s, p", POOLS)
def test_pool_matches_torch(tiled, shape, k, s, p):
    """Max and average pooling against PyTorch through the wrapper, and the kernel under both index widths (WIDE
    forced: its sizes, window, stride and padding are constants, passed by keyword)."""
    torch.manual_seed(0)
    x = torch.randn(shape)
    n = len(shape) - 2
    for kind in ("max", "avg"):
        want = getattr(F, f"{kind}_pool{n}d")(x, k, s, p)
        got = tiled.pool(x, tuple(want.shape), k, s, p, kind == "max")
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        out, grid, args, meta = tiled.pool_setup(x, tuple(want.shape), k, s, p)
        assert meta["KW"] == k and meta["PW"] == p and not meta["WIDE"]
        out.zero_()
        kernels.pool_rows_kernel[grid](x, *args, IS_MAX=kind == "max", **{**meta, "WIDE": True})
        torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)


POOL_FUSED = {  # name: (nodes, shapes, outputs): one kernel each, the epilogue applied where it stores
    "avgpool1d-leakyrelu": (
        [
            ("AvgPool1d", [0], 1, {"kernel": 4, "stride": 4, "padding": 1}, []),
            ("LeakyReLU", [1], 2, {"negative_slope": 0.1}, []),
        ],
        {0: (3, 5, 64), 1: (3, 5, 16), 2: (3, 5, 16)},
        [2],
    ),
    "maxpool3d-broadcast-minimum": (
        [("MaxPool3d", [0], 1, {"kernel": 3, "stride": 2, "padding": 1}, []), ("Minimum", [1, 2], 3, {}, [])],
        {0: (2, 3, 7, 8, 9), 1: (2, 3, 4, 4, 5), 2: (3, 1, 1, 5), 3: (2, 3, 4, 4, 5)},
        [3],
    ),
}


@pytest.mark.parametrize("name", sorted(POOL_FUSED))
def test_pool_epilogue(name, tmp_path):
    nodes, shapes, outputs = POOL_FUSED[name]
    rec = _handmade(nodes, shapes, outputs)
    src = lower_program(Program.from_json(rec.dag), rec.source)
    assert src.count("# fused: ") == 1 and "pool_rows_kernel" not in src.split("class ModelNew")[1]
    check_lowering(rec, tmp_path)


def test_pool_tuning_key():
    """Its own key (the tiles differ from the flat kernel's before it): rows, the row length and the window's taps."""
    assert tuning.kernel_dims("AvgPool2d", {"kernel": 3}, [[2, 4, 32, 32]], [2, 4, 16, 16]) == (
        "pool_rows_kernel",
        (128, 16, 9),
    )
