"""lower_program(unsplit=True): a norm that split_norm takes by default (few long rows) but of at least 132 rows runs
a program a row (row_norm_kernel, one launch, no partial statistics): a GroupNorm of 32 groups over a batch of 5 with
its SiLU, PyTorch's values under the interpreter's tiles and a GPU's; fewer rows keep the split."""

import torch
from test_lowering import _handmade, _import, model_pair
from test_norm_persistent import _gpu_module

from drtriton_ray.ir import Program
from drtriton_ray.lower.emit import lower_program
from drtriton_ray.verify.static import check_candidate

GROUP_NORM_SILU = [("GroupNorm", [0], 1, {"num_groups": 32, "eps": 1e-6}, [3, 4]), ("Swish", [1], 2, {}, [])]


def group_norm(batch: int):
    """GroupNorm(32, 64) + SiLU on (batch, 64, 32, 256): rows of 2 channels x 8,192 positions = 16,384 values."""
    x = (batch, 64, 32, 256)
    rec = _handmade(GROUP_NORM_SILU, {0: x, 1: x, 2: x, 3: (64,), 4: (64,)}, [2], (3, 4))
    return rec, Program.from_json(rec.dag)


def test_a_split_norm_of_many_rows_has_a_variant_a_program_a_row(tmp_path):
    rec, prog = group_norm(5)  # 160 rows
    default, unsplit = lower_program(prog, rec.source), lower_program(prog, rec.source, unsplit=True)
    assert "split_norm_setup(" in default and "split_norm_setup(" not in unsplit and "row_norm_setup(" in unsplit
    assert not check_candidate(unsplit, "strict")  # the verifier's parent-side rules
    model, gpu, inputs = model_pair(rec.source, _gpu_module(unsplit, tmp_path / "unsplit_gpu.py"))
    cpu = model_pair(rec.source, _import(unsplit, tmp_path / "unsplit_cpu.py"))[1]
    with torch.no_grad():
        want = model(*inputs)
        torch.testing.assert_close(gpu(*inputs), want, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(cpu(*inputs), want, atol=1e-4, rtol=1e-4)
    rec, prog = group_norm(2)  # 64 rows: too few for a program each, split only
    assert lower_program(prog, rec.source, unsplit=True) == lower_program(prog, rec.source)
