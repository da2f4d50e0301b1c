"""Broadcast elementwise kernels (lower/elementwise.py: fused_kernel_source; kernels.py: tile_block, col_offset,
leaf_tile): against PyTorch in the Triton interpreter under the interpreter's tiles and a GPU's, every kind of leaf
(a scalar, per channel, per row, along a middle dim, along the columns, short innermost runs, strided views), tiles
that fit the output exactly (masks folded) and ragged ones, both index widths; the int64 guard of elementwise_args;
and lowered programs through the strict verifier's static rules."""

import pytest
import test_lowering
import torch
from test_lowering import _handmade, _import, _with_library, check_lowering

from drtriton_ray.lower.elementwise import fused_kernel_source
from drtriton_ray.lower.emit import lower_program, short_runs
from drtriton_ray.ir import Program

tiled = test_lowering.tiled  # the fixture: the interpreter's tiles, a GPU's, compiled on a GPU

# name: (output shape, leaf a, leaf b): a * b + c with c dense of the output's shape
PATTERNS = {
    "scalar": ((6, 37, 5), (1,), (6, 37, 5)),
    "per-channel": ((2, 12, 9, 11), (1, 12, 1, 1), (2, 12, 9, 11)),
    "per-row-and-column": ((33, 70), (33, 1), (1, 70)),
    "middle-dim": ((5, 9, 40), (1, 9, 1), (5, 1, 40)),
    "row-vector-long-rows": ((3, 2, 700), (3, 1, 1), (700,)),
    "short-runs-l2-31": ((40, 30, 1, 7, 1), (40, 1, 1, 7, 1), (30, 1, 7, 1)),
    "short-runs-l2-14": ((9, 1, 1, 30, 6), (9, 1, 1, 1, 6), (9, 1, 1, 30, 6)),
    "exact-tiles": ((16, 32, 8), (16, 1, 8), (32, 1)),
    "ragged-tiles": ((15, 30, 7), (15, 1, 7), (30, 1)),
    "scalar-and-row": ((8, 64), (1, 1), (8, 1)),
}


def _leaves(shape, a, b):
    torch.manual_seed(0)
    return torch.randn(a), torch.randn(b), torch.randn(shape)


@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_broadcast_patterns_match_torch(tiled, name, tmp_path):
    """a * b + c, columns over one dim and over two, the wrapper's tile and a small one (ragged, many programs),
    int32 and int64 indices: PyTorch's values."""
    shape, a_shape, b_shape = PATTERNS[name]
    a, b, c = _leaves(shape, a_shape, b_shape)
    dense = [tuple(a_shape) == shape, tuple(b_shape) == shape, True]
    want = a * b + c
    for columns in sorted({1, short_runs(shape, [a_shape, b_shape, shape], dense)} | {2}):
        src = _with_library(fused_kernel_source("k_bc", dense, ["t3 = v0 * v1 + v2"], "t3", columns))
        mod = _import(src, tmp_path / f"bc_{name}_{columns}.py")
        for config in (None, {"BLOCK": 16}):
            out, grid, args, meta = tiled.elementwise_args(
                shape, torch.float32, dense, a, b, c, config=config, columns=columns
            )
            for wide in (False, True):
                out.zero_()
                mod.k_bc[grid](*args, **{**meta, "WIDE": wide})
                torch.testing.assert_close(out, want, msg=f"{name} columns {columns} {config} {meta} wide {wide}")


def test_strided_leaves(tmp_path):
    """Leaves that are views: a transposed one, one with a step of 2 (col_offset's merged columns at stride 2), an
    expanded one (zero strides): PyTorch's values, columns over one dim and over two."""
    from drtriton_ray.lower.wrappers import elementwise_args

    torch.manual_seed(0)
    shape = (6, 10, 7)
    cases = [
        (torch.randn(7, 6).t().reshape(6, 1, 7), torch.randn(10, 1)),  # a transposed (6, 7) viewed (6, 1, 7)
        (torch.randn(6, 1, 14)[:, :, ::2], torch.randn(1, 10, 14)[:, :, 1::2]),  # steps of 2 along the columns
        (torch.randn(6, 1, 1).expand(6, 1, 7), torch.randn(10, 7)),
    ]
    for columns in (1, 2):
        src = _with_library(fused_kernel_source("k_view", [False, False], ["t2 = v0 - v1"], "t2", columns))
        mod = _import(src, tmp_path / f"view_{columns}.py")
        for a, b in cases:
            for config in (None, {"BLOCK": 16}):
                out, grid, args, meta = elementwise_args(
                    shape, torch.float32, [False, False], a, b, config=config, columns=columns
                )
                mod.k_view[grid](*args, **meta)
                torch.testing.assert_close(out, a - b, msg=f"{a.stride()} {b.stride()} {columns} {config}")


def test_broadcast_tile_sizes(monkeypatch):
    """Compiled, a broadcast kernel's tile is 2048 values (a thread's 16 share their index math), columns over two
    dims at most 512 wide (4 rows at least); a dense kernel's stays 1024; a tuned BLOCK overrides both. The
    interpreter keeps 1024."""
    from drtriton_ray.lower import wrappers

    meta_of = lambda shape, *leaves, **kw: wrappers.elementwise_args(  # noqa: E731
        shape,
        torch.float32,
        [tuple(t) == shape for t in leaves],
        *(torch.empty(t, device="meta") for t in leaves),
        **kw,
    )[3]
    monkeypatch.setattr(wrappers, "compiled", lambda t: True)
    m = meta_of((8192, 8192, 1, 7, 1), (8192, 1, 1, 7, 1), (8192, 1, 7, 1), columns=2)
    assert (m["BLOCK_R"], m["BLOCK_C"], m["WIDE"]) == (4, 512, False)
    m = meta_of((7498, 1, 7, 1, 8192), (8192,), (7498, 1, 7, 1, 1))
    assert (m["BLOCK_R"], m["BLOCK_C"]) == (1, 2048)
    assert meta_of((6, 8192, 7339), (6, 8192, 7339))["BLOCK"] == 1024
    m = meta_of((7498, 1, 7, 1, 8192), (8192,), (7498, 1, 7, 1, 1), config={"BLOCK": 4096, "num_warps": 8})
    assert (m["BLOCK_R"], m["BLOCK_C"], m["num_warps"]) == (1, 4096, 8)
    monkeypatch.setattr(wrappers, "compiled", lambda t: False)
    m = meta_of((7498, 1, 7, 1, 8192), (8192,), (7498, 1, 7, 1, 1))
    assert m["BLOCK_R"] * m["BLOCK_C"] == 1024


def test_int64_guard():
    """int32 index math below 2^31, int64 (WIDE) from there: an output of 2^31 values or more, an input whose offsets
    reach 2^31 (a view into a larger tensor), and tiles whose padding past a ragged row takes an index there though
    the output itself is smaller (3 rows of 715827882: the last tile of each row runs 342 columns past it)."""
    from drtriton_ray.lower import wrappers

    def wide(shape, *leaves, columns=1):
        dense = [tuple(t.shape) == shape for t in leaves]
        return wrappers.elementwise_args(shape, torch.float32, dense, *leaves, columns=columns)[3]["WIDE"]

    meta = lambda *s: torch.empty(s, device="meta")  # noqa: E731
    assert not wide((8192, 8192, 7), meta(8192, 1, 7), meta(8192, 7), columns=2)
    assert wide((2**16, 2**15 + 1), meta(2**16, 1), meta(2**16, 2**15 + 1))  # 2^31 + 2^16 values
    assert 3 * 715827882 < 2**31 and wide((3, 715827882), meta(3, 1), meta(715827882))
    assert not wide((3, 715826176), meta(3, 1), meta(715826176))  # rows of 699049 tiles exactly: int32
    big = torch.empty(2**31 + 64, device="meta")[:: 2**25].view(65, 1)  # offsets past 2^31, 65 values
    assert wide((65, 8), big, meta(65, 8))


# name: (nodes, shapes, outputs) of broadcast elementwise programs as the level-2 draws have them, small
PROGRAMS = {
    "maximum-hardswish-short-runs": (
        [("Maximum", [0, 1], 2, {}, []), ("Hardswish", [2], 3, {}, [])],
        {0: (24, 1, 1, 7, 1), 1: (20, 1, 7, 1), 2: (24, 20, 1, 7, 1), 3: (24, 20, 1, 7, 1)},
        [3],
    ),
    "mul-exp-row-and-column": (
        [("Mul", [0, 1], 2, {}, []), ("Exp", [2], 3, {}, [])],
        {0: (64,), 1: (9, 1, 7, 1, 1), 2: (9, 1, 7, 1, 64), 3: (9, 1, 7, 1, 64)},
        [3],
    ),
    "add-hardsigmoid-scalar-per-batch": (
        [("Add", [0, 1], 2, {}, []), ("Hardsigmoid", [2], 3, {}, [])],
        {0: (4, 1, 1, 1, 1), 1: (20, 64), 2: (4, 1, 1, 20, 64), 3: (4, 1, 1, 20, 64)},
        [3],
    ),
    "mul-tanh-short-runs-dense": (
        [("Mul", [0, 1], 2, {}, []), ("Tanh", [2], 3, {}, [])],
        {0: (11, 1, 1, 1, 6), 1: (11, 1, 1, 30, 6), 2: (11, 1, 1, 30, 6), 3: (11, 1, 1, 30, 6)},
        [3],
    ),
    "where-per-channel-scalar": (
        [("Sub", [0, 1], 2, {}, []), ("Where", [2, 3, 4], 5, {}, [])],
        {0: (2, 6, 5, 7), 1: (6, 1, 1), 2: (2, 6, 5, 7), 3: (1,), 4: (2, 6, 5, 7), 5: (2, 6, 5, 7)},
        [5],
    ),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_broadcast_programs_lowered(tiled, name, tmp_path):
    """Whole programs: one kernel, its broadcast leaves through leaf_tile, the strict verifier's static rules
    (check_lowering) and PyTorch's values, under the interpreter's tiles and a GPU's."""
    rec = _handmade(*PROGRAMS[name])
    src = lower_program(Program.from_json(rec.dag), rec.source)
    assert "leaf_tile(in" in src and "tile_block(" in src and "n: tl.constexpr" in src, src
    check_lowering(rec, tmp_path)
