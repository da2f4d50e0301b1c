"""Layout operators: transposes and permutations by transpose_tile_kernel (tiles coalesced on both sides), an
elementwise group fused into the copy, copies that are views, and broadcast elementwise kernels whose columns span
the two innermost dims; against PyTorch in the Triton interpreter under the interpreter's and a GPU's tiles."""

import pytest
import torch
import test_lowering
from test_lowering import _handmade, check_lowering

from drtriton_ray.lower.emit import fragments, lower_program
from drtriton_ray.synth import Program

tiled = test_lowering.tiled  # the fixture: the interpreter's tiles, a GPU's, compiled on a GPU

# (shape, permutation): 2-5 dims, sizes no multiple of a tile, the source's unit-stride dim inside (a transpose
# proper), kept innermost (whole runs a tile), or a size-1 dim moved with it
PERMUTES = [
    ((37, 53), (1, 0)),
    ((70, 300), (1, 0)),
    ((3, 65, 130), (2, 1, 0)),
    ((3, 65, 130), (0, 2, 1)),
    ((5, 7, 9), (1, 0, 2)),
    ((2, 3, 5, 7), (3, 1, 0, 2)),
    ((4, 1, 6, 33), (3, 2, 1, 0)),
    ((2, 3, 4, 5, 6), (4, 2, 0, 3, 1)),
    ((1, 4, 9, 11, 2), (0, 4, 2, 3, 1)),
    ((6, 2, 1, 40, 3), (0, 1, 2, 4, 3)),
]


@pytest.mark.parametrize("shape, dims", PERMUTES)
def test_permute_copy_matches_torch(tiled, shape, dims):
    torch.manual_seed(0)
    x = torch.randn(shape)
    want = x.permute(dims).contiguous()
    got = tiled.permute_copy(x, dims)
    assert got.is_contiguous() and torch.equal(got, want)
    if len(shape) >= 2:
        assert torch.equal(tiled.transpose(x, 0, -1), x.transpose(0, -1).contiguous())
    ints = torch.randint(-(2**40), 2**40, shape)  # copied as is: no float32 on the way
    assert torch.equal(tiled.permute_copy(ints, dims), ints.permute(dims).contiguous())


def test_copies_that_are_views(tiled):
    """Where only size-1 dims move, or a slice is the outer dim's, the layout is already the result's: a view."""
    x = torch.randn(7, 1, 5, 1, 6)
    for got, want in (
        (tiled.transpose(x, 1, 3), x.transpose(1, 3)),
        (tiled.transpose(x, -2, -1), x.transpose(-2, -1)),
        (tiled.permute_copy(x, (1, 0, 2, 4, 3)), x.permute(1, 0, 2, 4, 3)),
        (tiled.narrow_copy(x, 0, 2, 3), x.narrow(0, 2, 3)),
        (tiled.select_copy(x, 0, 4), x.select(0, 4)),
    ):
        assert got.is_contiguous() and got.data_ptr() == want.data_ptr() and torch.equal(got, want.contiguous())


LAYOUT_FUSED = {  # name: (nodes, shapes, outputs): one kernel, transpose_tile_kernel with the group as epilogue
    "transpose-elu": (
        [("Transpose", [0], 1, {"dim0": -3, "dim1": -1}, []), ("ELU", [1], 2, {"alpha": 0.9}, [])],
        {0: (5, 33, 70), 1: (70, 33, 5), 2: (70, 33, 5)},
        [2],
    ),
    "size1-transpose-elu": (
        [("Transpose", [0], 1, {"dim0": -2, "dim1": -1}, []), ("ELU", [1], 2, {"alpha": 0.9}, [])],
        {0: (3, 1, 50, 70, 1), 1: (3, 1, 50, 1, 70), 2: (3, 1, 50, 1, 70)},
        [2],
    ),
    "permute-broadcast-add-tanh": (
        [
            ("Permute", [0], 1, {"dims": (2, 0, 1)}, []),
            ("Add", [1, 2], 3, {}, []),
            ("Tanh", [3], 4, {}, []),
        ],
        {0: (6, 45, 67), 1: (67, 6, 45), 2: (6, 1), 3: (67, 6, 45), 4: (67, 6, 45)},
        [4],
    ),
}


@pytest.mark.parametrize("name", sorted(LAYOUT_FUSED))
def test_layout_epilogue(name, tmp_path):
    nodes, shapes, outputs = LAYOUT_FUSED[name]
    rec = _handmade(nodes, shapes, outputs)
    prog = Program.from_json(rec.dag)
    assert len(fragments(prog)) == 1
    src = lower_program(prog, rec.source)
    assert src.count("# fused: ") == 1 and "permute_setup(" in src
    check_lowering(rec, tmp_path)


def test_transpose_of_transpose_output(tmp_path):
    """A transpose read by two operators (no epilogue) and a program output: its own kernel, then the others."""
    rec = _handmade(
        [
            ("Transpose", [0], 1, {"dim0": 0, "dim1": 1}, []),
            ("ReLU", [1], 2, {}, []),
            ("Sum", [1], 3, {"dim": -1, "keepdim": False}, []),
        ],
        {0: (40, 70), 1: (70, 40), 2: (70, 40), 3: (70,)},
        [1, 2, 3],
    )
    check_lowering(rec, tmp_path)
