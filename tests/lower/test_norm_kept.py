"""A norm's prologue kept as a second output (lower/grouping.py KEPT): a residual add + RMS norm that returns both
the new residual and the norm is one kernel, which stores the sum where it reads each value once; against PyTorch
in the Triton interpreter, for each norm kernel (a program per row, persistent, split over few long rows), under the
interpreter's tiles and a 2-SM GPU's."""

import re

import pytest
import torch
from test_lowering import _handmade, check_lowering, model_pair
from test_norm_persistent import _gpu_module

from drtriton_ray.ir import Program
from drtriton_ray.lower.emit import lower_program
from drtriton_ray.lower.grouping import kernel_groups

ROWS = {  # the norm kernel a shape takes: row_norm_kernel, row_norm_persistent_kernel, split_norm
    "rows": (37, 300),
    "persistent": (5, 6000),
    "split": (3, 20000),
}


def _residual_norm(shape, norm="RMSNorm", kept=None):
    """x + r, normed (with a weight), both returned; `kept`: an op applied to the sum before it is returned."""
    length = shape[-1]
    nodes = [("Add", [0, 1], 2, {}, []), (norm, [2], 3, {"k": 1}, [4] + ([5] if norm == "LayerNorm" else []))]
    shapes = {0: shape, 1: shape, 2: shape, 3: shape, 4: (length,), **({5: (length,)} if norm == "LayerNorm" else {})}
    outputs = [3, 2]
    if kept:
        nodes.append((kept, [2], 6, {}, []))
        shapes[6], outputs = shape, [3, 6]
    return _handmade(nodes, shapes, outputs, (4, 5) if norm == "LayerNorm" else (4,))


def _kernels(src: str) -> int:
    """Kernels the forward launches: the fused wrappers and library calls it makes."""
    forward = src[src.index("def forward") :]
    return len(re.findall(r"= (fused_\d+|\w*norm\w*)\(", forward))


@pytest.mark.parametrize("rows", sorted(ROWS))
@pytest.mark.parametrize("case", ["rms-residual", "layer-tanh"])
def test_residual_norm_is_one_kernel(case, rows, tmp_path):
    """The sum (or a group of it alone) is stored by the norm's kernel: one kernel, both outputs PyTorch's (the
    verifier's static rules too), under the interpreter's tiles and a 2-SM GPU's."""
    rec = _residual_norm(ROWS[rows], *(("RMSNorm", None) if case == "rms-residual" else ("LayerNorm", "Tanh")))
    prog = Program.from_json(rec.dag)
    (group,) = kernel_groups(prog)
    assert group.kept_out == (2 if case == "rms-residual" else 6)
    src = lower_program(prog, rec.source)
    assert _kernels(src) == 1 and "tl.store(kept_ptr + " in src
    check_lowering(rec, tmp_path)
    model, new, inputs = model_pair(rec.source, _gpu_module(src, tmp_path / f"gpu_{case.replace('-', '_')}.py"))
    with torch.no_grad():
        for got, want in zip(new(*inputs), model(*inputs)):
            torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_split_norm_statistics_do_not_store(tmp_path):
    """A split norm's statistics kernel computes the prologue too, but only its second kernel stores the kept value
    (each value once)."""
    rec = _residual_norm(ROWS["split"])
    src = lower_program(Program.from_json(rec.dag), rec.source)
    stats = src[src.index("def fused_0_stats_kernel") : src.index("def fused_0_kernel")]
    assert "kept_ptr" not in stats and src.count("tl.store(kept_ptr + ") == 1


def test_kept_group_reading_another_tensor_is_its_own_kernel():
    """A group that reads the sum and another input is not kept: the sum is written by a kernel of its own."""
    shape = (8, 64)
    nodes = [("Add", [0, 1], 2, {}, []), ("RMSNorm", [2], 3, {"k": 1}, [4]), ("Mul", [2, 5], 6, {}, [])]
    shapes = {0: shape, 1: shape, 2: shape, 3: shape, 4: (64,), 5: shape, 6: shape}
    prog = Program.from_json(_handmade(nodes, shapes, [3, 6], (4,)).dag)
    assert all(g.kept_out is None for g in kernel_groups(prog)) and len(kernel_groups(prog)) == 3


def test_batch_norm_does_not_keep():
    """batch_norm_kernel has no load marked as reading each value once: its prologue's result stays a kernel's."""
    shape = (4, 8, 16)
    nodes = [("Add", [0, 1], 2, {}, []), ("BatchNorm", [2], 3, {}, [4, 5])]
    shapes = {0: shape, 1: shape, 2: shape, 3: shape, 4: (8,), 5: (8,)}
    prog = Program.from_json(_handmade(nodes, shapes, [3, 2], (4, 5)).dag)
    assert all(g.kept_out is None for g in kernel_groups(prog)) and len(kernel_groups(prog)) == 2


@pytest.mark.parametrize("shape", [(2, 8, 5, 7), (2, 4, 160, 160)], ids=["rows", "split"])
def test_group_norm_keeps_its_prologue(shape, tmp_path):
    """A group norm over x + r that also returns the sum: one kernel (a program per image and group, or split over
    few long rows), both outputs PyTorch's."""
    channels = shape[1]
    nodes = [("Add", [0, 1], 2, {}, []), ("GroupNorm", [2], 3, {"num_groups": 2}, [4, 5])]
    shapes = {0: shape, 1: shape, 2: shape, 3: shape, 4: (channels,), 5: (channels,)}
    rec = _handmade(nodes, shapes, [3, 2], (4, 5))
    prog = Program.from_json(rec.dag)
    (group,) = kernel_groups(prog)
    assert group.kept_out == 2
    assert "tl.store(kept_ptr + " in lower_program(prog, rec.source)
    check_lowering(rec, tmp_path)


def _rows_general(shape):
    """The residual add + RMS norm lowered with its row count symbolic (`num_tokens`, read from the input), as a
    captured program whose token count varies is."""
    rec = _residual_norm(shape)
    prog = Program.from_json(rec.dag)
    for t in prog.tensors.values():
        t.sym = ["num_tokens", ""] if len(t.shape) == 2 else []
    return rec, lower_program(prog, rec.source)


def _right_at(module, source, rows, device, width=2048):
    """Both outputs PyTorch's at each row count."""
    model, new, _ = model_pair(source, module)
    model, new = model.to(device), new.to(device)
    with torch.no_grad():
        for n in rows:
            x, r = torch.randn(n, width, device=device), torch.randn(n, width, device=device)
            for got, want in zip(new(x, r), model(x, r)):
                torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_the_norm_takes_any_row_count(tmp_path):
    """With its row count symbolic the fused norm is right at row counts it was not lowered at (the interpreter)."""
    from test_lowering import _import

    rec, src = _rows_general((64, 2048))
    assert "n_rows, L: tl.constexpr" in src  # an argument, not a constant (a compile a count on a GPU)
    _right_at(_import(src, tmp_path / "rows.py"), rec.source, (64, 5, 96), "cpu")


@pytest.mark.gpu
def test_a_new_row_count_does_not_compile_the_norm_again(tmp_path):
    """On a GPU the fused norm's row count is an argument: the residual add + RMS norm at 64, 96 and 4,096 rows runs
    one compiled kernel (Triton specializes an int only by divisibility by 16 and by 1), and is right at each."""
    import os

    from test_lowering import _import

    if not torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("needs a CUDA GPU with compiled Triton")
    rec, src = _rows_general((64, 2048))
    module = _import(src, tmp_path / "rows.py")
    _right_at(module, rec.source, (64, 96, 4096), "cuda")
    compiled = module.fused_0_kernel.device_caches[torch.cuda.current_device()][0]  # Triton 3.x: a device's cache
    assert len(compiled) == 1, list(compiled)
