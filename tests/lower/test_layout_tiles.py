"""Layout operators: transposes and permutations by transpose_tile_kernel (tiles coalesced on both sides), an
elementwise group fused into the copy, copies that are views, and broadcast elementwise kernels whose columns span
the two innermost dims; against PyTorch in the Triton interpreter under the interpreter's and a GPU's tiles."""

import pytest
import torch
import test_lowering
from test_lowering import _handmade, check_lowering

from drtriton_ray.lower.emit import lower_program
from drtriton_ray.lower.grouping import kernel_groups
from drtriton_ray.ir import Program

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


def test_layouts_that_are_views(tmp_path):
    """A transpose moving only size-1 dims of a tensor a kernel wrote is a view (reshape_view); of a program input
    it is still a copy (the forward must launch a kernel its result depends on), and so is one that moves more."""
    nodes = [("LogSoftmax", [0], 1, {"dim": -1}, []), ("Transpose", [1], 2, {"dim0": -2, "dim1": -1}, [])]
    rec = _handmade(nodes, {0: (5, 1, 30, 1, 6), 1: (5, 1, 30, 1, 6), 2: (5, 1, 30, 6, 1)}, [2])
    forward = lower_program(Program.from_json(rec.dag), rec.source).split("def forward")[1]
    assert "tensor_2 = reshape_view(tensor_1, (5, 1, 30, 6, 1))" in forward
    check_lowering(rec, tmp_path)
    for shapes in ({0: (5, 1, 30, 1, 6), 1: (5, 1, 30, 6, 1)}, {0: (5, 2, 30, 1, 6), 1: (5, 2, 30, 6, 1)}):
        rec = _handmade([("Transpose", [0], 1, {"dim0": -2, "dim1": -1}, [])], shapes, [1])
        forward = lower_program(Program.from_json(rec.dag), rec.source).split("def forward")[1]
        assert "tensor_1 = transpose(tensor_0, -2, -1)" in forward
        check_lowering(rec, tmp_path)


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
    assert len(kernel_groups(prog)) == 1
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


def test_broadcast_columns_over_two_dims(tmp_path):
    """A broadcast elementwise kernel whose columns span (d3, d4): short innermost runs, leaves of every kind
    (a row broadcast, a column broadcast, a dense one, a transposed view), tiles of many rows and of one."""
    from test_lowering import _import, _with_library

    from drtriton_ray.lower.elementwise import fused_kernel_source
    from drtriton_ray.lower.wrappers import elementwise_args

    src = _with_library(fused_kernel_source("k_cols", [False, False, True], ["t3 = v0 * v1 - v2"], "t3", columns=2))
    mod = _import(src, tmp_path / "ew_cols.py")
    torch.manual_seed(0)
    cases = [
        ((64, 50, 7), torch.randn(64, 1, 7), torch.randn(50, 1)),
        ((8, 1, 1, 30, 6), torch.randn(8, 1, 1, 1, 6), torch.randn(30, 1)),
        ((3, 5, 4, 9, 3), torch.randn(5, 1, 9, 1), torch.randn(3, 1, 4, 1, 3)),
        ((6, 9, 5), torch.randn(5, 9).t(), torch.randn(6, 1, 1)),  # a transposed leaf
        ((2, 700, 3), torch.randn(700, 1), torch.randn(2, 1, 3)),  # columns wider than a tile
    ]
    for shape, a, b in cases:
        c = torch.randn(shape)
        for block in (1024, 16):
            out, grid, args, meta = elementwise_args(
                shape, torch.float32, [False, False, True], a, b, c, config={"BLOCK": block}, columns=2
            )
            mod.k_cols[grid](*args, **meta)
            assert torch.allclose(out, a * b - c), (shape, block)


def test_short_runs_lowered(tmp_path):
    """Programs 31 and 14's layouts, small: the emitter picks columns over two dims, the values are PyTorch's."""
    from drtriton_ray.lower.emit import short_runs

    assert short_runs((8192, 8192, 1, 7, 1), [(8192, 1, 1, 7, 1), (8192, 1, 7, 1)], [False, False]) == 2
    assert short_runs((7305, 1, 1, 8192, 6), [(7305, 1, 1, 1, 6), (7305, 1, 1, 8192, 6)], [False, True]) == 2
    assert short_runs((8, 16, 512), [(16, 1), (8, 16, 512)], [False, True]) == 1  # long runs
    assert short_runs((8, 16, 5), [(8, 16, 5)], [True]) == 1
    rec = _handmade(
        [("Maximum", [0, 1], 2, {}, []), ("Hardswish", [2], 3, {}, [])],
        {0: (40, 1, 1, 7, 1), 1: (30, 1, 7, 1), 2: (40, 30, 1, 7, 1), 3: (40, 30, 1, 7, 1)},
        [3],
    )
    assert "columns=2" in lower_program(Program.from_json(rec.dag), rec.source)
    check_lowering(rec, tmp_path)


@pytest.mark.slow  # a GPU bench's smoke run on CPU
def test_probe_smoke():
    """bench/layout_probe.py --smoke: the layout programs drawn small, lowered and run in the interpreter, right."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    run = subprocess.run(
        [sys.executable, str(root / "bench" / "layout_probe.py"), "--smoke", "--programs", "13,41,2,31,14"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "wrong: none" in run.stdout


REDUCED_LAYOUTS = {  # name: (nodes, shapes, outputs): the reduction reads the layout operator's input
    "transpose-max": (
        [("Transpose", [0], 1, {"dim0": -4, "dim1": -1}, []), ("Max", [1], 2, {"dim": -3, "keepdim": False}, [])],
        {0: (1, 4, 30, 20, 2), 1: (1, 2, 30, 20, 4), 2: (1, 2, 20, 4)},
        [2],
    ),
    "transpose-sum-over-a-swapped-dim": (
        [("Transpose", [0], 1, {"dim0": 0, "dim1": 2}, []), ("Sum", [1], 2, {"dim": 0, "keepdim": True}, [])],
        {0: (5, 6, 33), 1: (33, 6, 5), 2: (1, 6, 5)},
        [2],
    ),
    "permute-argmax": (
        [
            ("Permute", [0], 1, {"dims": (2, 0, 1)}, []),
            ("ArgMax", [1], 2, {"dim": 1, "keepdim": False}, []),
        ],
        {0: (7, 9, 11), 1: (11, 7, 9), 2: (11, 9)},
        [2],
    ),
}


@pytest.mark.parametrize("name", sorted(REDUCED_LAYOUTS))
def test_reduction_of_a_layout(name, tmp_path):
    nodes, shapes, outputs = REDUCED_LAYOUTS[name]
    rec = _handmade(nodes, shapes, outputs)
    src = lower_program(Program.from_json(rec.dag), rec.source).split("class ModelNew")[1]
    assert "reduce_dim(tensor_0," in src and "transpose(" not in src
    check_lowering(rec, tmp_path)
