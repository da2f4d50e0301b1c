"""Output comparison: values are compared in chunks, and chunking changes nothing in the result."""

import pytest
import torch

from drtriton_ray.verify import compare as cmp
from drtriton_ray.verify.verdict import Status


def outputs():
    g = torch.Generator().manual_seed(0)
    ref = torch.randn(13, 11, generator=g)
    cand = ref.clone()
    cand[0, 0] += 0.5  # off in the first chunk
    cand[7, 3] += 0.01  # off by 10x the tolerance, in a middle chunk
    cand[12, 10] = float("nan")  # NaN where the reference is finite, in the last chunk
    ref[5, 5] = cand[5, 5] = float("inf")  # Inf on both sides agrees
    return cand.t().contiguous().t(), ref  # a non-contiguous candidate, as a transposed view returns


@pytest.mark.parametrize("chunk", [1, 7, 64, 1 << 24])
def test_chunked_comparison_matches_whole(monkeypatch, chunk):
    monkeypatch.setattr(cmp, "CHUNK", chunk)
    cand, ref = outputs()
    result = cmp.compare(cand, ref)
    assert result.status == Status.VALUE_MISMATCH
    assert result.detail.startswith("output 0: 3/143 elements off") and "1 NaN/Inf where the reference" in result.detail
    assert result.max_abs == pytest.approx(0.5, rel=1e-6)


def test_within_tolerance_is_correct(monkeypatch):
    monkeypatch.setattr(cmp, "CHUNK", 5)
    _, ref = outputs()
    result = cmp.compare(ref + 1e-5, ref)
    assert result.ok and 0 < result.max_abs < 2e-5


def test_rounding_noise_and_headroom_see_intermediates():
    """The conditioning modes act on what torch functions compute: views and in-place results pass untouched, new
    tensors carry a few float32 rounding errors; the headroom records the largest finite intermediate."""
    from drtriton_ray.verify.conditioning import EPS, ULPS, Headroom, RoundingNoise

    x = torch.full((64,), 3.0)
    with RoundingNoise(torch.Generator().manual_seed(0)):
        y = x * 1.0
        view = y.view(8, 8)
    assert view.data_ptr() == y.data_ptr()
    spacing = 2.0**-22  # float32's between 2 and 4: the perturbed value rounds once more
    assert 0 < float((y - 3.0).abs().max()) <= 3.0 * ULPS * EPS + spacing
    with Headroom() as h:
        torch.exp2(torch.tensor([10.0, 70.0, float("inf")]))
    assert h.exceeded() and float(h.peak) == 2.0**70
    with Headroom() as h:
        torch.exp2(torch.tensor([10.0, 60.0]))
    assert not h.exceeded()
