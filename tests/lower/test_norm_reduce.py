"""norm_reduce_kernel: a layer or RMS norm read only by a reduction over an outer dim, lowered as one pass over x
(the rows normalised where they are loaded, reduced across rows, splits combined by reduce_kernel), against PyTorch
in the Triton interpreter."""

import pytest
from test_lowering import _handmade, check_lowering

from drtriton_ray.lower.emit import lower_program
from drtriton_ray.ir import Program

CASES = {  # name: (nodes, shapes, outputs, weights)
    "layer-norm-max-dim0": (  # the reduced dim outermost, several (o, m) and splits
        [("LayerNorm", [0], 1, {"k": 1}, [3, 4]), ("Max", [1], 2, {"dim": 0, "keepdim": False}, [])],
        {0: (40, 3, 50), 1: (40, 3, 50), 2: (3, 50), 3: (50,), 4: (50,)},
        [2],
        (3, 4),
    ),
    "rms-norm-mean-middle": (  # two normalised dims, a dim on either side of the reduced one, keepdim
        [("RMSNorm", [0], 1, {"k": 2}, [3]), ("Mean", [1], 2, {"dim": 1, "keepdim": True}, [])],
        {0: (2, 13, 3, 4, 20), 1: (2, 13, 3, 4, 20), 2: (2, 1, 3, 4, 20), 3: (4, 20)},
        [2],
        (3,),
    ),
    "relu-layer-norm-norm": (  # a prologue computed where the rows load; an L2 norm's partial roots
        [
            ("ReLU", [0], 1, {}, []),
            ("LayerNorm", [1], 2, {"k": 1}, [4, 5]),
            ("Norm", [2], 3, {"dim": -2, "keepdim": False}, []),
        ],
        {0: (2, 30, 70), 1: (2, 30, 70), 2: (2, 30, 70), 3: (2, 70), 4: (70,), 5: (70,)},
        [3],
        (4, 5),
    ),
    "layer-norm-min-sum": (  # one row a split (R under 4 per split), a second reduction after
        [
            ("LayerNorm", [0], 1, {"k": 1}, [4, 5]),
            ("Min", [1], 2, {"dim": 0, "keepdim": False}, []),
            ("Sum", [2], 3, {"dim": 0, "keepdim": False}, []),
        ],
        {0: (3, 5, 16), 1: (3, 5, 16), 2: (5, 16), 3: (16,), 4: (16,), 5: (16,)},
        [3],
        (4, 5),
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_norm_reduce_matches_torch(name, tmp_path):
    """One kernel where the norm and its reduction were two (the normalised tensor never written), PyTorch's
    values."""
    rec = _handmade(*CASES[name])
    src = lower_program(Program.from_json(rec.dag), rec.source)
    assert "row_norm_kernel" not in src and "norm_reduce" in src
    check_lowering(rec, tmp_path)


def test_norm_reduce_not_along_the_row(tmp_path):
    """A reduction over a normalised dim stays two kernels (the row norm, then reduce_kernel)."""
    nodes = [("LayerNorm", [0], 1, {"k": 1}, [3, 4]), ("Max", [1], 2, {"dim": -1, "keepdim": False}, [])]
    rec = _handmade(nodes, {0: (6, 50), 1: (6, 50), 2: (6,), 3: (50,), 4: (50,)}, [2], (3, 4))
    src = lower_program(Program.from_json(rec.dag), rec.source)
    assert "row_norm_kernel" in src and "norm_reduce" not in src
    check_lowering(rec, tmp_path)
