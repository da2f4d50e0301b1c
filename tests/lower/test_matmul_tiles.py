"""matmul_kernel's grouped tile order and its 16-bit path: every output tile written once, at any tile count, and
16-bit operands multiplied in their own dtype (tensor cores on a GPU) with float32 sums, as torch.matmul."""

import os

import pytest
import torch

from drtriton_ray.lower import wrappers


def _reference(a, b, bias=None):
    out = a.float() @ b.float()
    return out if bias is None else out + bias.float()


@pytest.mark.parametrize("m, k, n", [(1100, 16, 300), (130, 40, 260), (5, 7, 3)])
def test_grouped_tile_order_covers_every_tile(m, k, n):
    """The interpreter's tiles are 128 wide: 1,100 rows are 9 tile rows, a group of 8 and a group of 1, each
    sweeping 3 tile columns; a tile written twice or missed shows as a wrong or uninitialized value."""
    torch.manual_seed(0)
    a, b = torch.randn(m, k), torch.randn(k, n)
    torch.testing.assert_close(wrappers.matmul(a, b), a @ b, atol=1e-4, rtol=1e-4)
    bias = torch.randn(n)
    torch.testing.assert_close(wrappers.linear(a, b.t().contiguous(), bias), a @ b + bias, atol=1e-4, rtol=1e-4)


def test_float16_operands_take_the_half_path(monkeypatch):
    """fp16 @ fp16 launches with HALF (the interpreter's dot handles fp16; bf16 it widens, see matmul_args) and is
    within fp16's rounding of the float32 product; mixed dtypes widen."""
    launched = []
    launch = wrappers.matmul_args

    def spy(*args, **kwargs):
        grid, rest, meta = launch(*args, **kwargs)
        launched.append(meta["HALF"])
        return grid, rest, meta

    monkeypatch.setattr(wrappers, "matmul_args", spy)
    torch.manual_seed(0)
    a, b = torch.randn(130, 40, dtype=torch.float16), torch.randn(40, 260, dtype=torch.float16)
    got = wrappers.matmul(a, b)
    assert got.dtype == torch.float16 and launched[-1] is True
    torch.testing.assert_close(got.float(), _reference(a, b), atol=2e-2, rtol=1e-2)
    wrappers.matmul(a.bfloat16(), b.bfloat16())
    assert launched[-1] is False  # the interpreter widens bfloat16


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_matmul_on_tensor_cores_is_right(dtype):
    """On a GPU, bf16 and fp16 operands multiply on tensor cores (128 x 128 x 64 tiles at these sizes): as close to
    the float32 product as torch.matmul (cuBLAS) is, over an lm_head-like product and a ragged one."""
    if not torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("needs a CUDA GPU with compiled Triton")
    torch.manual_seed(0)
    for m, k, n in ((2048, 2048, 32000), (1000, 200, 777), (3, 64, 4096)):
        a = torch.randn(m, k, device="cuda", dtype=dtype)
        b = torch.randn(k, n, device="cuda", dtype=dtype) / k**0.5
        want = _reference(a, b)
        ours = (wrappers.matmul(a, b).float() - want).abs().max().item()
        cublas = (torch.matmul(a, b).float() - want).abs().max().item()
        assert ours <= 2 * cublas + 1e-6, (m, k, n, ours, cublas)


def test_linear_reads_a_strided_input_in_place():
    """A slice of rows, of features, a transposed or a 4-d strided input: its leading dims are the matmul's batches,
    no copy; PyTorch's values."""
    torch.manual_seed(0)
    w, b = torch.randn(24, 16), torch.randn(24)
    x = torch.randn(3, 9, 16)
    views = [x[:, 1:], x[:, :-1], x[1:], torch.randn(3, 9, 20)[..., 2:18], torch.randn(16, 9).t(),
             torch.randn(2, 3, 5, 16)[:, :, ::2], x[0, 2:7]]  # fmt: skip
    assert sum(not v.is_contiguous() for v in views) == 5  # x[1:] and x[0, 2:7] take the contiguous path
    for v in views:
        torch.testing.assert_close(wrappers.linear(v, w, b), torch.nn.functional.linear(v, w, b), atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(wrappers.linear(v, w, None), v @ w.t(), atol=1e-4, rtol=1e-4)
