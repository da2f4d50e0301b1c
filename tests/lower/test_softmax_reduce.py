"""softmax_stats_kernel + softmax_reduce_kernel: a softmax or log-softmax read only by a reduction, lowered without its
output ever being written (the softmax's statistics in one pass over x, then the reduction recomputing the softmax
where it loads x), against PyTorch in the Triton interpreter."""

import pytest
import torch
from test_lowering import _handmade, _import, check_lowering

from drtriton_ray.lower import wrappers
from drtriton_ray.lower.emit import lower_program
from drtriton_ray.lower.passes import fold_softmax_reduce
from drtriton_ray.ir import Program
from drtriton_ray.ir import load_problem

CASES = {  # name: (nodes, shapes, outputs, weights, how the reduction reads the statistics: STATS)
    "softmax-norm-inner": (  # l2-5's pattern: the softmax along dim -3, a norm over dim -2 (the columns share theirs)
        [("Softmax", [0], 1, {"dim": -3}, []), ("Norm", [1], 2, {"dim": -2, "keepdim": True}, [])],
        {0: (2, 5, 24, 40, 1), 1: (2, 5, 24, 40, 1), 2: (2, 5, 24, 1, 1)},
        [2],
        (),
        1,
    ),
    "log-softmax-var-outer": (  # l2-164's: the reduced dim before the softmax's, keepdim
        [("LogSoftmax", [0], 1, {"dim": -1}, []), ("Var", [1], 2, {"dim": -4, "keepdim": True}, [])],
        {0: (3, 1, 1, 8), 1: (3, 1, 1, 8), 2: (1, 1, 1, 8)},
        [2],
        (),
        1,
    ),
    "softmax-sum-outer-per-element": (  # a dim after the softmax's: statistics per element
        [("Softmax", [0], 1, {"dim": 1}, []), ("Sum", [1], 2, {"dim": 0, "keepdim": False}, [])],
        {0: (4, 6, 5), 1: (4, 6, 5), 2: (6, 5)},
        [2],
        (),
        0,
    ),
    "log-softmax-min-inner-per-element": (  # the reduced dim after the softmax's, a dim between them
        [("LogSoftmax", [0], 1, {"dim": 0}, []), ("Min", [1], 2, {"dim": 2, "keepdim": False}, [])],
        {0: (6, 4, 5), 1: (6, 4, 5), 2: (6, 4)},
        [2],
        (),
        0,
    ),
    "log-softmax-max-same-dim": (  # l5-20's: the reduction along the softmax's own dim (its statistics a column)
        [("LogSoftmax", [0], 1, {"dim": -5}, []), ("Max", [1], 2, {"dim": -5, "keepdim": True}, [])],
        {0: (3, 5, 21, 2, 19), 1: (3, 5, 21, 2, 19), 2: (1, 5, 21, 2, 19)},
        [2],
        (),
        2,
    ),
    "softmax-mean-same-last-dim": (
        [("Softmax", [0], 1, {"dim": -1}, []), ("Mean", [1], 2, {"dim": -1, "keepdim": False}, [])],
        {0: (7, 33), 1: (7, 33), 2: (7,)},
        [2],
        (),
        2,
    ),
    "softmax-argmax": (  # an index output: no epilogue, the first maximum's index
        [("Softmax", [0], 1, {"dim": 1}, []), ("ArgMax", [1], 2, {"dim": 2, "keepdim": False}, [])],
        {0: (3, 4, 50), 1: (3, 4, 50), 2: (3, 4)},
        [2],
        (),
        1,
    ),
    "log-softmax-argmin-outer": (
        [("LogSoftmax", [0], 1, {"dim": -1}, []), ("ArgMin", [1], 2, {"dim": 0, "keepdim": True}, [])],
        {0: (9, 3, 16), 1: (9, 3, 16), 2: (1, 3, 16)},
        [2],
        (),
        1,
    ),
    "prologue-softmax-norm-epilogue": (  # elementwise before (a broadcast leaf: both kernels unravel) and after
        [
            ("Mul", [0, 3], 4, {}, []),
            ("Tanh", [4], 5, {}, []),
            ("Softmax", [5], 1, {"dim": -3}, []),
            ("Norm", [1], 2, {"dim": -1, "keepdim": False}, []),
            ("Add", [2, 6], 7, {}, []),
            ("ReLU", [7], 8, {}, []),
        ],
        {
            0: (4, 30, 20),
            3: (30, 1),
            4: (4, 30, 20),
            5: (4, 30, 20),
            1: (4, 30, 20),
            2: (4, 30),
            6: (30,),
            7: (4, 30),
            8: (4, 30),
        },
        [8],
        (),
        0,
    ),
    "prologue-log-softmax-sum-same-dim": (
        [
            ("Sigmoid", [0], 1, {}, []),
            ("LogSoftmax", [1], 2, {"dim": 1}, []),
            ("Sum", [2], 3, {"dim": 1, "keepdim": False}, []),
            ("Hardswish", [3], 4, {}, []),
        ],
        {0: (5, 70, 3), 1: (5, 70, 3), 2: (5, 70, 3), 3: (5, 3), 4: (5, 3)},
        [4],
        (),
        2,
    ),
}


def _source(name: str):
    nodes, shapes, outputs, weights, _ = CASES[name]
    rec = _handmade(nodes, shapes, outputs, weights)
    return rec, lower_program(Program.from_json(rec.dag), rec.source)


@pytest.mark.parametrize("name", sorted(CASES))
def test_softmax_reduce_matches_torch(name, tmp_path):
    """Two kernels (statistics, then the reduction recomputing the softmax) where the softmax wrote its output for
    the reduction to read back; the reduction reads the statistics as the case says; PyTorch's values, and the
    verifier's static rules (check_lowering)."""
    rec, src = _source(name)
    assert "def along_" not in src and " reduce_kernel[" not in src  # neither the softmax's kernel nor reduce_kernel
    assert "softmax_stats_kernel" in src and "softmax_reduce_kernel" in src
    nodes, shapes = CASES[name][:2]
    soft = next(n for n in nodes if n[0] in ("Softmax", "LogSoftmax"))
    red = nodes[nodes.index(soft) + 1]
    assert wrappers.softmax_stats_mode(shapes[soft[1][0]], soft[3]["dim"], red[3]["dim"]) == CASES[name][-1]
    check_lowering(rec, tmp_path)


@pytest.mark.parametrize("name", ["softmax-norm-inner", "log-softmax-max-same-dim", "prologue-softmax-norm-epilogue"])
def test_softmax_reduce_under_gpu_tiles(name, tmp_path):
    """The kernels under a GPU's tiles (several steps of the online statistics, several programs a segment): the
    solution's `compiled` made to say True, its kernels still interpreted."""
    rec, src = _source(name)
    mod = _import(
        src.replace("def compiled(t):\n    ", "def compiled(t):\n    return True\n    "),
        tmp_path / f"gpu_tiles_{name.replace('-', '_')}.py",
    )
    ref = load_problem(rec.source)
    torch.manual_seed(0)
    model = ref.Model()
    torch.manual_seed(0)
    new = mod.ModelNew()
    inputs = ref.get_inputs()
    with torch.no_grad():
        torch.testing.assert_close(new(*inputs), model(*inputs), atol=1e-4, rtol=1e-4)


def _launch(x, sdim, log, dim, keepdim, op, stats_tile, tile):
    """softmax_reduce with its kernels' tiles forced ([BLOCK_R, BLOCK_C] each), as on a GPU's small tiles."""
    from drtriton_ray.lower.kernels import softmax_reduce_kernel, softmax_stats_kernel

    stats, _, args, meta = wrappers.softmax_stats_setup(x.shape, x, sdim)
    meta.update(BLOCK_R=stats_tile[0], BLOCK_C=stats_tile[1])
    softmax_stats_kernel[(-(-meta["n_cols"] // meta["BLOCK_C"]),)](x, *args, LOG=log, **meta)
    out, _, args, meta = wrappers.softmax_reduce_setup(x.shape, x, stats, sdim, dim, keepdim, op)
    meta.update(BLOCK_R=tile[0], BLOCK_C=tile[1])
    grid = (x.numel() // x.shape[dim] // meta["SEG"] * -(-meta["SEG"] // tile[1]),)
    mode = wrappers.softmax_stats_mode(x.shape, sdim, dim)
    softmax_reduce_kernel[grid](x, *args, OP=op, LOG=log, STATS=mode, **meta)
    return out


REDUCTIONS = {
    0: lambda y, d, k: y.sum(d, keepdim=k),
    1: lambda y, d, k: y.mean(d, keepdim=k),
    2: lambda y, d, k: y.amax(d, keepdim=k),
    3: lambda y, d, k: y.amin(d, keepdim=k),
    4: lambda y, d, k: y.argmax(d, keepdim=k),
    5: lambda y, d, k: y.argmin(d, keepdim=k),
    6: lambda y, d, k: y.var(d, keepdim=k),
    7: lambda y, d, k: torch.norm(y, p=2, dim=d, keepdim=k),
}


# the 3-D shape's 36 pairs take 44 s in the interpreter: `make test-slow`; CI runs the 5-D one (size-1 dims too)
@pytest.mark.parametrize("shape", [pytest.param((3, 37, 6), marks=pytest.mark.slow), (2, 1, 19, 1, 9)])
def test_softmax_reduce_every_op_and_dim_pair(shape):
    """Every reduction over every dim of a softmax along every dim (of a softmax or a log-softmax, in turns), with
    tiles smaller than the columns (the online statistics over several steps, the rescaling where the maximum grows)
    and than a segment (several programs share one): PyTorch's values, an arg reduction's exact indices."""
    torch.manual_seed(0)
    x = torch.randn(shape) * 4
    dims = [d for d in range(len(shape)) if shape[d] > 1]
    for sdim in dims:
        for log in (0, 1):
            y = torch.log_softmax(x, sdim) if log else torch.softmax(x, sdim)
            for dim in dims:
                for op, reduce in REDUCTIONS.items():
                    if (op + sdim + dim + log) % 2:  # each op once a dim pair, softmax or log-softmax
                        continue
                    keep = bool((op // 2 + sdim) % 2)
                    got = _launch(x, sdim, log, dim, keep, op, (16, 4), (16, 4))
                    want = reduce(y, dim, keep)
                    if op in (4, 5):
                        assert torch.equal(got, want), (sdim, dim, log, op)
                    else:
                        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5, msg=str((sdim, dim, log, op)))


def test_softmax_not_folded_where_its_output_is_read_otherwise(tmp_path):
    """A softmax with a second reader, or that is a program output, keeps its kernel (its output is needed)."""
    softmax = ("Softmax", [0], 1, {"dim": -1}, [])
    two_readers = [softmax, ("Sum", [1], 2, {"dim": -1, "keepdim": False}, []), ("ReLU", [1], 3, {}, [])]
    output = [softmax, ("Max", [1], 2, {"dim": -1, "keepdim": False}, [])]
    for nodes, outputs in ((two_readers, [2, 3]), (output, [1, 2])):
        shapes = {0: (6, 40), 1: (6, 40), 2: (6,), 3: (6, 40)} if 3 in outputs else {0: (6, 40), 1: (6, 40), 2: (6,)}
        rec = _handmade(nodes, shapes, outputs)
        prog = Program.from_json(rec.dag)
        assert fold_softmax_reduce(prog) is prog
        src = lower_program(prog, rec.source)
        assert "softmax_reduce" not in src and "def along_dim" in src
        check_lowering(rec, tmp_path)


def test_softmax_reduce_through_a_transpose(tmp_path):
    """A reduction of a transposed softmax (fold_layouts reduces the softmax's output in its own layout) folds too."""
    nodes = [
        ("Softmax", [0], 1, {"dim": 1}, []),
        ("Transpose", [1], 2, {"dim0": 0, "dim1": 2}, []),
        ("Sum", [2], 3, {"dim": 0, "keepdim": False}, []),
    ]
    rec = _handmade(nodes, {0: (3, 8, 5), 1: (3, 8, 5), 2: (5, 8, 3), 3: (8, 3)}, [3])
    src = lower_program(Program.from_json(rec.dag), rec.source)
    assert "softmax_reduce" in src and "def along_" not in src
    check_lowering(rec, tmp_path)


def test_half_precision_arg_reduction_not_folded():
    """An argmax of a bfloat16 softmax compares the rounded values (ties among them pick the first index), which a
    float32 recomputation would not reproduce: it keeps the softmax's kernel; a sum of one folds."""
    from drtriton_ray.ir import Tensor

    for op, folds in (("ArgMax", False), ("Sum", True)):
        nodes = [("Softmax", [0], 1, {"dim": 1}, []), (op, [1], 2, {"dim": 0, "keepdim": False}, [])]
        prog = Program.from_json(_handmade(nodes, {0: (4, 30), 1: (4, 30), 2: (30,)}, [2]).dag)
        half = {k: Tensor(t.id, t.shape, "bfloat16", t.role, t.init) for k, t in prog.tensors.items()}
        half[2] = Tensor(2, [30], "int64" if op == "ArgMax" else "bfloat16", "output", "")
        prog = Program(prog.nodes, half, "bfloat16", 0)
        assert (fold_softmax_reduce(prog) is not prog) == folds
