"""Launch choices of the norm kernels on a GPU, checked on the CPU: row_norm_kernel's default tile (a long row in one
tile) and split_norm's grid (whole waves of programs), the wrappers told they run compiled; meta tensors where only
the launch is checked, the interpreter where values are."""

import pytest
import torch
import torch.nn.functional as F

from drtriton_ray.lower import tuning, wrappers


@pytest.fixture
def gpu_tiles(monkeypatch):
    monkeypatch.setattr(wrappers, "compiled", lambda t: True)


@pytest.mark.parametrize(
    "length, block, warps",
    [(7503, 8192, 8), (8192, 8192, 8), (12000, 16384, 16), (32768, 32768, 16)],
)
def test_long_row_is_one_tile(gpu_tiles, length, block, warps):
    """A row of up to 32768 values is one tile, a program per row, a warp per 1024 values (16 at most)."""
    x = torch.empty(4096, length, device="meta")
    w = torch.empty(length, device="meta")
    _, grid, _, meta = wrappers.row_norm_setup(x.shape, x, w, w, 0)
    assert (meta["BLOCK"], meta["BLOCK_ROWS"], meta["num_warps"]) == (block, 1, warps)
    assert grid == (4096,)


def test_group_norm_row_of_32768_is_one_tile(gpu_tiles):
    """GroupNorm of 2 groups over (8192, 32, 2048): rows of 16 channels x 2048 positions, each one tile."""
    x = torch.empty(8192, 32, 1, 1, 2048, device="meta")
    w = torch.empty(32, device="meta")
    _, grid, _, meta = wrappers.row_norm_setup(x.shape, x, w, w, 2, 2)
    assert (meta["L"], meta["BLOCK"], meta["BLOCK_ROWS"], meta["num_warps"]) == (32768, 32768, 1, 16)
    assert grid == (16384,)


def test_short_and_very_long_rows_keep_their_tiles(gpu_tiles):
    """Short rows share a program (4096 values a tile, the default warps); rows past 32768 loop in 4096-value steps
    by 8 warps (a GroupNorm of 32 groups over 8 x 512 x 64 x 64: 256 rows of 65536); a tuned config overrides the
    default; the interpreter keeps its own large tiles."""
    assert wrappers.row_norm_tile(32768, 768, torch.empty(0)) == {"BLOCK_ROWS": 4, "BLOCK": 1024}
    assert wrappers.row_norm_tile(8, 4096, torch.empty(0)) == {"BLOCK_ROWS": 1, "BLOCK": 4096}
    assert wrappers.row_norm_tile(4096, 131072, torch.empty(0)) == {"BLOCK_ROWS": 1, "BLOCK": 4096, "num_warps": 8}
    assert wrappers.row_norm_tile(256, 65536, torch.empty(0)) == {"BLOCK_ROWS": 1, "BLOCK": 4096, "num_warps": 8}
    x = torch.empty(4096, 7503, device="meta")
    w = torch.empty(7503, device="meta")
    meta = wrappers.row_norm_setup(x.shape, x, w, w, 0, config={"num_warps": 4})[3]
    assert (meta["BLOCK"], meta["num_warps"]) == (8192, 4)
    assert {"BLOCK": 32768, "BLOCK_ROWS": 1, "num_warps": 16} in tuning.candidates("row_norm_kernel", (16384, 32768))


def test_long_row_interpreted_tiles(monkeypatch):
    """The interpreter keeps its tiles (its cost is per program and step): several 7503-long rows to a program."""
    monkeypatch.setattr(wrappers, "compiled", lambda t: False)
    assert wrappers.row_norm_tile(57344, 7503, torch.empty(0)) == {"BLOCK_ROWS": 8, "BLOCK": 8192}


@pytest.mark.parametrize(
    "shape, mode, rows",
    [((2048, 32, 1, 1, 8192), 4, 32), ((8, 7296, 1, 8192, 1), 2, 8), ((4, 200, 16384), 4, 200)],
)
def test_split_norm_grid_stays_within_its_programs(gpu_tiles, shape, mode, rows):
    """split_norm's grid: at most 8 programs per SM of a 132-SM GPU (one wave of both kernels, whose registers let 8
    fit; never a few past), most of them used, and the splits of a row cover its tiles (the geometry: constexprs)."""
    x = torch.empty(shape, device="meta")
    w = torch.empty(shape[1], device="meta")
    _, grid, stats, _, meta = wrappers.split_norm_setup(shape, x, w, w, mode, 1)
    tiles, split_tiles = meta["TILES"], meta["SPLIT_TILES"]
    assert grid[0] == rows and 0.85 * 8 * 132 <= grid[0] * grid[1] <= 8 * 132, grid
    assert (grid[1] - 1) * split_tiles < tiles <= grid[1] * split_tiles and meta["BLOCK_SPLITS"] >= grid[1]
    if shape == (2048, 32, 1, 1, 8192):
        assert grid == (32, 33)


@pytest.mark.parametrize("distribution", ["normal", "offset"])
def test_batch_norm_split_under_gpu_tiles(gpu_tiles, distribution):
    """BatchNorm of few channels through split_norm under a GPU's grid (several splits a channel), interpreted,
    against a float64 PyTorch reference within float32 rounding (the verifier's error measure)."""
    torch.manual_seed(0)
    x = torch.randn(16, 3, 4096)
    x = 1e4 + 10 * x if distribution == "offset" else x
    w, b = torch.randn(3), torch.randn(3)
    assert wrappers.split_norm_setup(x.shape, x, w, b, 4)[1][1] > 1
    got = wrappers.split_norm(x, w, b, 4)
    want = F.batch_norm(x.double(), None, None, w.double(), b.double(), training=True)
    err = ((got.double() - want).abs() / (want.abs() + want.pow(2).mean().sqrt())).max().item()
    assert err < (2.5e-4 if distribution == "offset" else 1e-5), err
