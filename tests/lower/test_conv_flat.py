"""conv_kernel's FLAT path (one loop over tap block x channel block steps, the default compiled) and its int32 index
math (WIDE off): against PyTorch in the interpreter under the interpreter's and a GPU's tiles, with channels over
several reduction steps a tap; the wrappers' choice; what Triton's compiler for an H100 makes of it."""

from pathlib import Path

import pytest
import torch
import test_lowering

from drtriton_ray.lower import wrappers

tiled = test_lowering.tiled  # the fixture: the interpreter's tiles, a GPU's, compiled on a GPU
ROOT = Path(__file__).resolve().parents[2]

# (spatial dims, transposed, groups, in channels, out channels, size, kernel, stride, padding, dilation): input
# channels a group past one step of 32 (a partial last step), several tap blocks
CASES = [
    (2, False, 1, 40, 20, 6, 3, 1, 1, 1),
    (1, False, 2, 80, 6, 9, 5, 2, 2, 1),
    (3, False, 1, 33, 17, 4, 3, 1, 1, 2),
    (2, True, 1, 40, 8, 5, 4, 2, 1, 1),
    (1, True, 2, 72, 6, 7, 3, 3, 0, 2),
    *test_lowering.CONVS[:6],
]


@pytest.mark.parametrize("flat", [True, False], ids=["flat", "nested"])
@pytest.mark.parametrize("case", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_conv_paths_match_torch(tiled, case, flat):
    torch.manual_seed(0)
    x, w, b, want = test_lowering.torch_conv(case)
    _, transposed, groups, _, _, _, _, stride, padding, dilation = case
    got = tiled.conv(x, w, b, tuple(want.shape), stride, padding, dilation, groups, transposed, {"FLAT": flat})
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_conv_path_choice(monkeypatch):
    """Compiled: FLAT and int32 by default, int64 from 2^29 values of a tensor or where a config asks (it may only
    widen); interpreted: the nested loops and int64, FLAT where a config says."""
    x, w, b = torch.empty(16, 64, 56, 56, device="meta"), torch.empty(128, 64, 3, 3, device="meta"), None
    setup = lambda x, config=None: wrappers.conv_setup(x, w, b, (x.shape[0], 128, 56, 56), 1, 1, 1, 1, False, config)  # noqa: E731
    assert {k: setup(x)[3][k] for k in ("FLAT", "WIDE")} == {"FLAT": False, "WIDE": True}
    assert setup(x, {"FLAT": True})[3]["FLAT"]
    monkeypatch.setattr(wrappers, "compiled", lambda t: True)
    assert {k: setup(x)[3][k] for k in ("FLAT", "WIDE")} == {"FLAT": True, "WIDE": False}
    assert setup(x, {"WIDE": True})[3]["WIDE"] and not setup(x, {"FLAT": False})[3]["FLAT"]
    big = torch.empty(2**29 // (64 * 56 * 56) + 1, 64, 56, 56, device="meta")
    assert setup(big)[3]["WIDE"] and setup(big, {"WIDE": False})[3]["WIDE"]


HOPPER = """
import sys
sys.path.insert(0, sys.argv[1])
import sm90_asm
shape = ((16, 64, 56, 56), (128, 64, 3, 3), 1, 1, 1, 1, False, (16, 128, 56, 56))
for name, config in (("flat", None), ("old", {"FLAT": False, "WIDE": True})):
    fn, launch, meta, consts, elements, grid = sm90_asm.conv_case(*shape, config=config)
    s = sm90_asm.stats(sm90_asm.compile_launch(fn, launch, meta, consts), elements)
    print(name, s["regs"], s["LDL"], s["STL"], s["ptx div/rem.s64"], s["cp.async"])
"""


def test_conv_flat_compiles_for_hopper():
    """Triton's compiler for an H100 (sm_90, no GPU needed; bench/sm90_asm.py) on a 64 -> 128 channel 3x3 conv:
    the flat loop's kernel keeps its pipelined gathers (cp.async), has no int64 division and no spill, and fewer
    registers than the nested loops with int64 math (255 and spills with Triton 3.9)."""
    stdout = test_lowering.compile_for_hopper(HOPPER, str(ROOT / "bench"))
    rows = {v[0]: [int(x) for x in v[1:]] for v in (ln.split() for ln in stdout.split("\n") if ln)}
    regs, ldl, stl, divs, copies = rows["flat"]
    assert ldl == stl == divs == 0 and copies > 0 and regs < rows["old"][0], rows
