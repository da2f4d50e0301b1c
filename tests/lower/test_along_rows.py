"""along_dim_kernel on short last-dim rows as constant-length rows (its ROW, wrappers.short_rows) with int32 index
math (WIDE off): against PyTorch in the interpreter under the interpreter's and a GPU's tiles, the configs that
force the old path (ROWS off, WIDE on), a fused epilogue, and what Triton's compiler for an H100 makes of it."""

from pathlib import Path

import pytest
import torch
import test_lowering
from test_lowering import _handmade, check_lowering

from drtriton_ray.lower import wrappers
from drtriton_ray.lower.emit import lower_program
from drtriton_ray.ir import Program

tiled = test_lowering.tiled  # the fixture: the interpreter's tiles, a GPU's, compiled on a GPU
ROOT = Path(__file__).resolve().parents[2]

# last-dim rows: lengths 1 to 16, power of two or not, row counts not a multiple of a tile's
SHAPES = [(5, 1, 7, 6), (3001, 4), (2, 300, 3), (777, 7), (130, 8), (65, 16), (9, 1), (4, 1, 33, 5)]
OPS = [
    lambda x: x.softmax(-1),
    lambda x: x.log_softmax(-1),
    lambda x: x.cumsum(-1),
    lambda x: x.cummax(-1).values,
    lambda x: x.cummin(-1).values,
]


@pytest.mark.parametrize("shape", SHAPES, ids=["x".join(map(str, s)) for s in SHAPES])
def test_short_rows_match_torch(tiled, shape):
    torch.manual_seed(0)
    x = torch.randn(shape) * 4
    assert tiled.along_setup(shape, x, -1)[3]["ROW"] == shape[-1]
    for op, want in enumerate(OPS):
        torch.testing.assert_close(tiled.along_dim(x, -1, op), want(x), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "config", [{"ROWS": False}, {"ROWS": False, "WIDE": True}, {"WIDE": True}, {"BLOCK_C": 64, "num_warps": 2}]
)
def test_forced_configs(config, monkeypatch):
    """What a probe or a tuned entry forces, applied as on a GPU (the wrappers told they run compiled): the old
    runtime-length path, int64 index math, another tile; PyTorch's values each time."""
    monkeypatch.setattr(wrappers, "compiled", lambda t: True)
    torch.manual_seed(0)
    x = torch.randn(1000, 6)
    meta = wrappers.along_setup(x.shape, x, -1, config)[3]
    assert meta["ROW"] == (0 if config.get("ROWS") is False else 6)
    assert meta["WIDE"] == bool(config.get("WIDE"))
    for op, want in enumerate(OPS):
        torch.testing.assert_close(wrappers.along_dim(x, -1, op, config), want(x), atol=1e-5, rtol=1e-5)


def test_row_choice():
    """Constant rows only along the last dim and up to 16 values; int64 only past 2^31 values, whatever a config
    says (it may widen, never narrow); ROWS decides interpreted too (a variant, not a tile)."""
    like = torch.empty(0, device="meta")  # outputs of 2^31 values allocate nothing
    assert wrappers.short_rows(16, 1) and not wrappers.short_rows(17, 1) and not wrappers.short_rows(4, 3)
    assert wrappers.along_setup((100, 17), like, -1)[3]["ROW"] == 0
    assert wrappers.along_setup((100, 4, 3), like, 1)[3]["ROW"] == 0
    assert wrappers.along_setup((100, 4), like, -1, {"ROWS": False})[3]["ROW"] == 0
    assert wrappers.along_setup((2**29, 4), like, -1)[3]["WIDE"]
    assert not wrappers.along_setup((2**29 - 1, 4), like, -1)[3]["WIDE"]
    old = wrappers.compiled
    try:
        wrappers.compiled = lambda t: True
        assert wrappers.along_setup((2**29, 4), like, -1, {"WIDE": False})[3]["WIDE"]
        meta = wrappers.along_setup((7305, 1, 8192, 1, 6), like, -1)[3]
        sizes = {"R": 6, "I": 1, "n_cols": 7305 * 8192}  # the kernel's constants, by keyword
        assert meta == {"BLOCK_R": 8, "BLOCK_C": 256, "AXIS": 1, "ROW": 6, "WIDE": False, **sizes}
    finally:
        wrappers.compiled = old


def test_short_rows_fuse(tmp_path):
    """Log-softmax over rows of 6 with a prologue and a broadcast epilogue: one kernel, the constant-row path
    (the site forms of fuse.py unchanged), PyTorch's values."""
    shape = (3, 50, 6)
    nodes = [("Sin", [0], 1, {}, []), ("LogSoftmax", [1], 2, {"dim": -1}, []), ("Mul", [2, 3], 4, {}, [])]
    shapes = {0: shape, 1: shape, 2: shape, 3: (1, 50, 1), 4: shape}
    rec = _handmade(nodes, shapes, [4])
    src = lower_program(Program.from_json(rec.dag), rec.source)
    assert src.count("# fused: ") == 1 and "elif ROW > 0:" in src
    check_lowering(rec, tmp_path)


HOPPER = """
import sys
sys.path.insert(0, sys.argv[1])
import sm90_asm
for shape in ((7305, 1, 8192, 1, 6), (6554, 2, 1, 8192, 4)):
    for config in (None, {"ROWS": False, "WIDE": True}):
        fn, launch, meta, consts, elements, grid = sm90_asm.along_case(shape, -1, 1, config)
        s = sm90_asm.stats(sm90_asm.compile_launch(fn, launch, meta, consts), elements)
        print(shape[-1], int(config is None), s["regs"], s["ld.global"], s["ld.global.v2/v4"], s["shfl"], s["LDL"])
"""


def test_short_rows_compile_for_hopper():
    """Triton's compiler for an H100 (sm_90, no GPU needed; bench/sm90_asm.py) on program 13's and 23's rows: the
    constant rows load as vectors (8 bytes for rows of 6, 16 for rows of 4; the old path's too now that R is a
    constant there as well: they were 4-byte loads), rows of 4 reduce within a thread (no shuffles), the constant
    rows take fewer registers (and no more shuffles), and neither path spills."""
    stdout = test_lowering.compile_for_hopper(HOPPER, str(ROOT / "bench"))
    rows = {(int(v[0]), int(v[1])): [int(x) for x in v[2:]] for v in (ln.split() for ln in stdout.split("\n") if ln)}
    for length in (6, 4):
        regs, loads, vector, shuffles, spills = rows[(length, 1)]
        old_regs, _, old_vector, old_shuffles, _ = rows[(length, 0)]
        assert loads == vector > 0 and old_vector > 0 and spills == 0, rows
        assert regs < old_regs and shuffles <= old_shuffles, rows  # rows of 4: neither shuffles now
    assert rows[(4, 1)][3] == 0, rows
