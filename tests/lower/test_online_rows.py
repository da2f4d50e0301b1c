"""One pass over each row, online: the log-sum-exp (softmax_stats_kernel, LOG 2) and the cross-entropy of 2-D logits
(cross_entropy_kernel, then one program's total), in the Triton interpreter against PyTorch in float64: every
reduction, ignored targets, rows longer than one block (the running maximum and rescaled sum across blocks),
float32 and bfloat16."""

import pytest
import torch
import torch.nn.functional as F

from drtriton_ray.lower.wrappers import cross_entropy, logsumexp, tile_elements

REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}
TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 2e-2}


def logits(rows: int, classes: int, dtype) -> torch.Tensor:
    torch.manual_seed(0)
    x = torch.randn(rows, classes) * 4
    x[:, classes // 3] += 30  # one large logit a row: the running maximum must rescale what came before it
    return x.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("reduction", list(REDUCTIONS))
def test_cross_entropy_matches_pytorch(dtype, reduction):
    x = logits(9, 1000, dtype)
    target = torch.randint(0, 1000, (9,))
    target[::4] = -100
    got = cross_entropy(x, target, -100, REDUCTIONS[reduction])
    want = F.cross_entropy(x.double(), target, ignore_index=-100, reduction=reduction)
    assert got.dtype == dtype and got.shape == want.shape
    torch.testing.assert_close(got.double(), want, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])


def test_rows_longer_than_a_block_and_every_target_ignored():
    classes = tile_elements(torch.empty(0)) + 77  # two blocks, the second partly masked
    x = logits(2, classes, torch.float32)
    target = torch.tensor([classes - 1, 5])
    torch.testing.assert_close(
        cross_entropy(x, target, -100, 1).double(), F.cross_entropy(x.double(), target), rtol=1e-5, atol=1e-5
    )
    torch.testing.assert_close(logsumexp(x, 1, False).double(), torch.logsumexp(x.double(), 1), rtol=1e-5, atol=1e-5)
    ignored = torch.full((2,), 7)
    assert torch.isnan(cross_entropy(x, ignored, 7, 1))  # PyTorch's mean over no counted row
    assert cross_entropy(x, ignored, 7, 2) == 0


@pytest.mark.parametrize("reduction", list(REDUCTIONS))
def test_cross_entropy_reads_shifted_rows_in_place(reduction):
    """A causal LM's loss: bf16 logits[:, :-1] and labels[:, 1:] (3-D and 2-D slices) read through their strides,
    the loss in float32 as F.cross_entropy(logits.float()[:, :-1].reshape(-1, V), ...) gives it; logits whose
    classes are strided and targets flattened apart are copied first, with the same values."""
    x = logits(3 * 6, 1000, torch.bfloat16).view(3, 6, 1000)
    labels = torch.randint(0, 1000, (3, 6))
    labels[:, 2] = -100
    want = F.cross_entropy(
        x.double()[:, :-1].reshape(-1, 1000), labels[:, 1:].reshape(-1), ignore_index=-100, reduction=reduction
    )
    got = cross_entropy(x[:, :-1], labels[:, 1:], -100, REDUCTIONS[reduction], out_dtype=torch.float32)
    assert got.dtype == torch.float32 and got.shape == want.shape
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    strided = x.transpose(1, 2).contiguous().transpose(1, 2)[:, :-1]  # classes not contiguous
    got = cross_entropy(strided, labels[:, 1:].reshape(-1), -100, REDUCTIONS[reduction], out_dtype=torch.float32)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("dim, keepdim", [(-1, False), (0, True), (1, False)])
def test_logsumexp_along_any_dim(dtype, dim, keepdim):
    x = logits(6, 50, dtype).reshape(6, 5, 10)
    got = logsumexp(x, dim, keepdim)
    want = torch.logsumexp(x.double(), dim, keepdim)
    assert got.dtype == dtype and got.shape == want.shape
    torch.testing.assert_close(got.double(), want, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])
