"""Softmax, log-softmax and scans along a dim other than the last: columns side by side in memory are read 32 or more
at a time (full 128-byte lines), by along_loop_kernel where a whole column's tile would hold fewer."""

import pytest
import torch
import test_lowering
from test_lowering import _handmade, check_lowering

from drtriton_ray.lower import tuning, wrappers
from drtriton_ray.lower.emit import lower_program
from drtriton_ray.ir import Program

tiled = test_lowering.tiled  # the fixture: the interpreter's tiles, a GPU's, compiled on a GPU

SHAPES = [((2, 300, 70), 1), ((3, 2000, 5), 1), ((4200, 5), 0), ((4, 100, 3), 1), ((2, 64, 64), 1)]


@pytest.mark.parametrize("shape, dim", SHAPES)
def test_along_non_last_dim(tiled, shape, dim):
    torch.manual_seed(0)
    x = torch.randn(shape)
    _, extent, inner = tiled.split_at(shape, dim)
    along = tiled.along_dim_long if tiled.long_column(extent, inner) else tiled.along_dim
    for op, want in enumerate(
        (x.softmax(dim), x.log_softmax(dim), x.cumsum(dim), x.cummax(dim).values, x.cummin(dim).values)
    ):
        torch.testing.assert_close(along(x, dim, op), want, atol=1e-4, rtol=1e-4)


def test_column_tiles():
    """A column of 1024 over 4096 contiguous neighbours loops, 128 rows x 32 columns a step where compiled; a short
    one (64) stays whole, 64 columns a tile; a last-dim column (inner 1) loops only past 4096 values and is tiled as
    contiguous rows. Its own tuning key where it loops."""
    assert wrappers.long_column(1024, 4096) and not wrappers.long_column(64, 4096)
    assert not wrappers.long_column(4096, 1) and wrappers.long_column(4097, 1)
    like = torch.empty(0)
    old = wrappers.compiled
    try:
        wrappers.compiled = lambda t: True
        sizes = {"R": 1024, "I": 4096, "n_cols": 16 * 4096}  # the kernel's constants, by keyword
        assert wrappers.along_setup((16, 1024, 4096), like, 1, loop=True)[3] == {"BLOCK_R": 128, "BLOCK_C": 32, **sizes}
        want = {"BLOCK_R": 64, "BLOCK_C": 64, "AXIS": 0, "ROW": 0, "WIDE": False}
        assert wrappers.along_setup((16, 64, 4096), like, 1)[3] == {**want, **sizes, "R": 64}
        # a short last dim: rows of the tile are contiguous in memory (its axis 1 runs along the extent)
        assert wrappers.along_setup((4096, 6), like, 1)[3]["AXIS"] == 1
    finally:
        wrappers.compiled = old
    assert tuning.kernel_dims("Softmax", {"dim": 1}, [[16, 1024, 4096]], [])[0] == "along_loop_kernel"
    assert tuning.kernel_dims("Softmax", {"dim": -1}, [[16, 1024]], [])[0] == "along_dim_kernel"


def test_channel_softmax_fuses(tmp_path):
    """Softmax over channels (a looped column) with a prologue and an epilogue: one kernel, PyTorch's values."""
    nodes = [("Sin", [0], 1, {}, []), ("Softmax", [1], 2, {"dim": 1}, []), ("Mul", [2, 3], 4, {}, [])]
    shapes = {0: (2, 300, 70), 1: (2, 300, 70), 2: (2, 300, 70), 3: (2, 1, 70), 4: (2, 300, 70)}
    rec = _handmade(nodes, shapes, [4])
    src = lower_program(Program.from_json(rec.dag), rec.source)
    assert "loop=True" in src and src.count("# fused: ") == 1
    check_lowering(rec, tmp_path)
