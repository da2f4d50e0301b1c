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


def _float64_values(c, r, tol):
    """The comparison worked in float64 throughout, as it was: the yardstick for the float32 one."""
    c64, r64 = c.reshape(-1).to(torch.float64), r.reshape(-1).to(torch.float64)
    finite_r = torch.isfinite(r64)
    scale = cmp.output_scale(r.reshape(-1)).item() if tol else 0.0
    diff = (c64 - r64).abs()
    within = torch.isfinite(diff) & (diff <= tol * scale + tol * r64.abs())
    close = within | (c64 == r64) | (c64.isnan() & r64.isnan())
    return int((~close).sum()), int((~torch.isfinite(c64) & finite_r).sum())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("magnitude", [1e-30, 1.0, 1e4, 1e30])
def test_float32_work_gives_the_float64_verdicts(dtype, magnitude):
    """Every element's verdict as the float64 comparison's, whatever the dtype and the magnitudes: values off by
    factors well inside and well outside the tolerance, mixed signs and scales, NaN and Inf on either side and both,
    zeros. The errors are kept away from the tolerance's edge (0.3x and 3x of it), where the two may round apart."""
    g = torch.Generator().manual_seed(int(magnitude > 1) + 7)
    n = 4000
    scale = min(magnitude, 10.0) if dtype == torch.float16 else magnitude  # float16 ends at 65504
    r = torch.randn(n, generator=g, dtype=torch.float64) * torch.pow(10.0, torch.rand(n, generator=g) * 4 - 2)
    r = (r * scale).to(dtype)
    tol = cmp.tolerance(dtype)
    rs = cmp.output_scale(r).item()
    factor = torch.where(torch.rand(n, generator=g) < 0.5, 0.3, 3.0).to(torch.float64)
    sign = torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0).to(torch.float64)
    c = (r.to(torch.float64) + sign * factor * tol * (r.to(torch.float64).abs() + rs)).to(dtype)
    for i, (cv, rv) in enumerate(
        [
            (float("nan"), 1.0),
            (1.0, float("nan")),
            (float("nan"), float("nan")),
            (float("inf"), float("inf")),
            (float("inf"), 1.0),
            (1.0, float("inf")),
            (-float("inf"), float("inf")),
            (0.0, 0.0),
        ]
    ):
        c[i], r[i] = cv, rv
    bad, nonfinite, max_abs, _, _ = cmp._values(c, r, tol)
    assert (bad, nonfinite) == _float64_values(c, r, tol)
    assert 0 < bad < n and nonfinite == 2  # NaN and Inf against a finite 1.0


def test_integer_outputs_compare_exactly_past_float32():
    """Integers (argmax indices) compare exactly, also past 2^24 where float32 merges neighbours."""
    r = torch.tensor([2**24 + 1, 2**40 + 3, 5], dtype=torch.int64)
    c = torch.tensor([2**24, 2**40 + 3, 5], dtype=torch.int64)
    result = cmp.compare(c, r)
    assert result.status == Status.VALUE_MISMATCH and result.detail.startswith("output 0: 1/3 elements off")


def _tf32(t):
    """float32 values cut to TF32's 10 mantissa bits."""
    return (t.view(torch.int32) & -8192).view(torch.float32)


@pytest.mark.parametrize("chunk", [7, 1 << 24])
def test_differential_rule_rejects_every_narrower_computation(monkeypatch, chunk):
    """A float32 matmul: a sequential float32 sum passes beside PyTorch's; float16, bfloat16 and TF32 operands fail,
    with float32's unit roundoff and eager's error in the reason."""
    monkeypatch.setattr(cmp, "CHUNK", chunk)
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(40, 64, generator=g), torch.randn(64, 30, generator=g)
    exact, eager = a.double() @ b.double(), a @ b
    sequential = torch.zeros(40, 30)
    for k in range(64):
        sequential += a[:, k : k + 1] * b[k]
    assert cmp.differential(sequential, eager, exact).ok
    for narrow in (lambda t: t.half().float(), lambda t: t.bfloat16().float(), _tf32):
        result = cmp.differential(narrow(a) @ narrow(b), eager, exact)
        assert result.status == Status.VALUE_MISMATCH and "ulp of torch.float32" in result.detail, result.detail
        assert result.ulps > 2 * cmp.FLOOR_ULPS["float32"]


def test_differential_floor_where_eager_is_exact():
    """ReLU is exact in float32: the bound is the dtype's floor, not zero, so a kernel off by a few roundings passes
    and one computing in float16 does not."""
    x = torch.randn(1000, generator=torch.Generator().manual_seed(1))
    exact, eager = torch.relu(x.double()), torch.relu(x)
    nudged = eager * (1 + 4 * cmp.UNIT_ROUNDOFF["float32"])
    result = cmp.differential(nudged, eager, exact)
    assert result.ok and result.eager_ulps == 0 and result.bound_ulps == cmp.FLOOR_ULPS["float32"]
    assert not cmp.differential(torch.relu(x.half()).float(), eager, exact).ok


def test_differential_half_outputs_judged_by_their_own_dtype():
    """A bfloat16 or float16 program computed in float32 and rounded once passes by its own dtype's standard; a
    float16 one computed through float8 does not."""
    x = torch.randn(2000, generator=torch.Generator().manual_seed(2))
    for dtype in (torch.bfloat16, torch.float16):
        low = x.to(dtype)
        exact, eager = torch.tanh(low.double()), torch.tanh(low)
        assert cmp.differential(torch.tanh(low.float()).to(dtype), eager, exact).ok
    half = x.half()
    through_fp8 = torch.tanh(half.float()).to(torch.float8_e4m3fn).half()
    assert not cmp.differential(through_fp8, torch.tanh(half), torch.tanh(half.double())).ok


def test_differential_zero_output_and_fallbacks():
    """An output exactly zero everywhere is judged on ZERO_SCALE; integer outputs exactly; without a float64
    reference the output-scale rule judges, and says so."""
    zero = torch.zeros(50)
    assert cmp.differential(zero + 1e-9, zero, zero.double()).ok
    assert not cmp.differential(zero + 1e-3, zero, zero.double()).ok
    idx = torch.arange(5)
    assert not cmp.differential((zero, idx + 1), (zero, idx), (zero.double(), idx)).ok
    result = cmp.differential(zero, zero, None)
    assert result.ok and result.rule.startswith("output scale")
    ref = torch.randn(10, generator=torch.Generator().manual_seed(3))
    eager_inf = ref.clone()
    eager_inf[0] = float("inf")
    assert cmp.differential(eager_inf, eager_inf, ref.double()).ok  # equal to eager where eager is not finite
    assert not cmp.differential(ref, eager_inf, ref.double()).ok


def test_a_replayed_output_is_told_from_one_that_varies_off_the_rows_grid():
    """Attention probabilities under a fixed padding mask that zeroes their first column: on every input distribution
    that column is 0 and the rest varies. With as many rows as the replay sample has places, evenly spaced places all
    fall in that column; the sample's scattered places do not, so the problem is not taken for one whose outputs are
    fixed (and a replay of the first outputs is, still)."""
    torch.manual_seed(0)
    shape = (cmp.NullCandidates.REPLAY_SAMPLE, 64)

    def probabilities():
        p = torch.softmax(torch.randn(shape), dim=-1)
        p[:, 0] = 0.0
        return p

    varying = cmp.NullCandidates()
    for _ in range(3):
        varying.observe([probabilities()])
    assert not varying.fixed
    replayed, out = cmp.NullCandidates(), probabilities()
    for _ in range(3):
        replayed.observe([out.clone()])
    assert replayed.fixed
