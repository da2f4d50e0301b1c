"""Output comparison: structure, type, device, dtype, shape, then values under a per-dtype tolerance that scales
with each output's own magnitude.

An element passes when |candidate - reference| <= tol * (|reference| + scale), where `scale` is the root mean square
of that output's finite reference values. A fixed absolute tolerance cannot serve every output: one of order 1e-4
would be matched by all zeros (a kernel that computes nothing), and one of order 1e4 would demand more digits than
float32 holds. Relative to the output's own scale, zeros fail wherever the output is not truly negligible, and a
correct kernel's rounding, which is relative to the magnitudes it computes with, passes.

Runs in the worker with functions captured before any candidate was imported (hooks.Trusted re-checks them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from drtriton_ray.verify.verdict import Status

# atol = rtol per dtype. float32 follows KernelBench-Verified (1e-3); half types KernelBench's 1e-2.
DEFAULT_TOLERANCE = {"float32": 1e-3, "float16": 1e-2, "bfloat16": 1e-2, "float64": 1e-7}
# A problem may ask for more with a module constant TOLERANCE, never beyond these caps.
MAX_TOLERANCE = {"float32": 1e-2, "float16": 5e-2, "bfloat16": 5e-2, "float64": 1e-5}
# The differential contract (differential()): a candidate's error against the float64 reference, relative to
# |exact| + the output's root mean square, may be EAGER_FACTOR times eager's own, and never less than the dtype's floor
# of FLOOR_ULPS unit roundoffs (capped by the tolerance). The factor leaves room for honest kernels that reduce in
# another order than PyTorch (one-pass statistics of a norm at a large offset come near 16 x eager's error), and the
# floor still catches a float32 program computed in float16, bfloat16 or TF32, which is off by several times it; the
# measured margins are in docs/results/verifier-numerics.md.
UNIT_ROUNDOFF = {"float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}
EAGER_FACTOR = 32.0
FLOOR_ULPS = {"float32": 1024.0, "float16": 8.0, "bfloat16": 2.0}
ZERO_SCALE = 1.0  # the absolute scale of an output that is exactly zero everywhere
# A reference is well-conditioned on some inputs when its own rounding (against a float64 evaluation) uses at most
# 1/CONDITIONING_MARGIN of the tolerance: a correct kernel rounds as much again in another order, and the two must
# still agree. Decisions on computed values (argmax, `> 0`) need this much room too (synthesis's validation).
CONDITIONING_MARGIN = 4.0


def tolerance(dtype, requested: Optional[float] = None) -> float:
    """0 for integer and bool outputs (exact); otherwise the dtype default, or the problem's TOLERANCE capped."""
    name = str(dtype).removeprefix("torch.")
    if name not in DEFAULT_TOLERANCE:
        return 0.0
    if requested is None:
        return DEFAULT_TOLERANCE[name]
    return min(max(float(requested), DEFAULT_TOLERANCE[name]), MAX_TOLERANCE[name])


@dataclass
class Comparison:
    status: Status
    detail: str = ""
    max_abs: float = 0.0
    max_rel: float = 0.0  # max abs error over the output's scale (output_scale)
    # the differential rule, for the output using the largest share of its bound: the candidate's and eager's errors
    # and the bound, in units of the output dtype's unit roundoff, and error / bound (<= 1 passes)
    ulps: float = 0.0
    eager_ulps: float = 0.0
    bound_ulps: float = 0.0
    share: float = 0.0
    rule: str = "output scale"  # "float64", or why the output-scale rule judged instead

    @property
    def ok(self) -> bool:
        return self.status == Status.CORRECT


def as_list(out) -> Optional[list]:
    if isinstance(out, (tuple, list)):
        return list(out)
    return [out]


CHUNK = 1 << 24  # elements compared at once: float64 temporaries of a few hundred MiB, whatever the output size


def output_scale(r):
    """Root mean square of a flat reference's finite values, at least the dtype's smallest normal number (an output
    that is exactly zero everywhere is then compared exactly): a 0-d float64 tensor on r's device, not read back."""
    import torch

    tiny = torch.finfo(r.dtype).tiny if r.is_floating_point() else 0.0
    return finite_rms(r).clamp_min(tiny)


def finite_rms(x):
    """Root mean square of a flat tensor's finite values (0 where none), summed in float64 by chunks: a 0-d float64
    tensor on x's device, not read back."""
    import torch

    total = torch.zeros((), dtype=torch.float64, device=x.device)
    count = torch.zeros((), dtype=torch.float64, device=x.device)
    for start in range(0, x.numel(), CHUNK):
        x64 = x[start : start + CHUNK].to(torch.float64)
        finite = torch.isfinite(x64)
        total += torch.where(finite, x64 * x64, 0.0).sum()
        count += finite.sum()
    return torch.where(count > 0, total / count.clamp_min(1.0), 0.0).sqrt()


def _work_dtype(dtype):
    """Where values are compared: float32 for float32 and half outputs, float64 for the rest (float64; integers and
    bools, compared exactly, which float32 could not do past 2^24). Near the tolerance's edge a candidate and its
    reference agree to 1e-3 of their size, so their float32 difference is exact (Sterbenz) and the bound
    tol * (|r| + scale) is off by a few float32 roundings, 1e-7 of it: float64 changes no verdict there, and its
    temporaries doubled the comparison's memory traffic (a GPU pass per temporary)."""
    import torch

    return torch.float32 if dtype.is_floating_point and dtype != torch.float64 else torch.float64


def _values(c, r, tol: float) -> tuple[int, int, float, float, float]:
    """Elements off, NaN/Inf where the reference is finite, max abs error, max error relative to the output's scale,
    and that scale, of two flat tensors. An element is close as torch.isclose(c, r, rtol=tol, atol=tol * scale,
    equal_nan=True) has it; the counts stay on the device until one read at the end (a read per count and chunk
    made comparing most of a fragment's checks on a GPU shared by several workers). The scale is summed in float64
    (squares of float32 values overflow float32), the values compared in _work_dtype."""
    import torch

    zero = torch.zeros((), dtype=torch.float64, device=r.device)
    scale = output_scale(r) if tol else zero
    work = _work_dtype(r.dtype)
    bound0 = (tol * scale).to(work)  # the absolute part of the bound, a 0-d tensor on the device
    bad, nonfinite, max_abs = zero.clone(), zero.clone(), zero.clone()
    for start in range(0, c.numel(), CHUNK):
        cw = c[start : start + CHUNK].to(work)
        rw = r[start : start + CHUNK].to(work)
        finite_c, finite_r = torch.isfinite(cw), torch.isfinite(rw)
        diff = (cw - rw).abs()
        # a finite difference within the bound (an infinite one is not, even where the reference's Inf makes the bound
        # infinite), or equal values (equal infinities)
        close = torch.isfinite(diff) & (diff <= rw.abs().mul_(tol).add_(bound0))
        close |= cw == rw
        close |= cw.isnan() & rw.isnan()
        max_abs = torch.maximum(max_abs, torch.where(finite_c & finite_r, diff, 0.0).max().to(torch.float64))
        bad += (~close).sum()
        nonfinite += (~finite_c & finite_r).sum()
    bad_n, nonfinite_n, max_abs_v, scale_v = torch.stack([bad, nonfinite, max_abs, scale]).tolist()
    return int(bad_n), int(nonfinite_n), max_abs_v, max_abs_v / scale_v if scale_v else 0.0, scale_v


class NullCandidates:
    """Candidates that compute nothing: all zeros, per output a constant (the first element of the first outputs
    observed), or the first outputs observed replayed whatever the inputs (compared on a sample of up to
    REPLAY_SAMPLE elements per output at the same scattered places in each set, kept on the CPU: paper-size outputs
    hold billions; evenly spaced places would fall in step with the rows, e.g. all in the first column of attention
    probabilities 2,048 wide, which a fixed padding mask holds at zero on every input). `observe` compares them
    with one set of reference outputs; `zeros` / `constant` stay True while they have matched every set observed, and
    `fixed` once two sets or more have all matched the first. A problem they pass on every input distribution cannot
    tell a kernel from nothing (a convolution whose padding leaves no tap on the input computes its bias alone): the
    verifier's self-test refuses it, and synthesis never emits it."""

    REPLAY_SAMPLE = 1 << 16

    def __init__(self, requested_tol: Optional[float] = None):
        self.tol = requested_tol
        self.zeros = self.constant = self.replays = True
        self.constants: Optional[list] = None
        self.first: Optional[list] = None
        self.sets = 0

    @property
    def fixed(self) -> bool:
        return self.replays and self.sets >= 2

    @classmethod
    def _sample(cls, out):
        """Up to REPLAY_SAMPLE of out's elements on the CPU, at places drawn once per size (the same in every set)."""
        import torch

        flat = out.reshape(-1)
        if flat.numel() <= cls.REPLAY_SAMPLE:
            return flat.cpu()
        places = torch.randint(flat.numel(), (cls.REPLAY_SAMPLE,), generator=torch.Generator().manual_seed(0))
        return flat[places.to(flat.device)].cpu()

    def observe(self, outs: list) -> None:
        import torch

        if self.constants is None:
            self.constants = [o.reshape(-1)[0].item() if o.numel() else 0 for o in outs]
        self.zeros = self.zeros and compare([torch.zeros_like(o) for o in outs], outs, self.tol).ok
        self.constant = (
            self.constant and compare([torch.full_like(o, c) for o, c in zip(outs, self.constants)], outs, self.tol).ok
        )
        samples = [self._sample(o) for o in outs]
        if self.first is None:
            self.first = samples
        self.replays = self.replays and compare(self.first, samples, self.tol).ok
        self.sets += 1


def _structure(candidate, reference) -> Optional[Comparison]:
    """What is wrong with the outputs' structure, type, device, dtype or shape, or None."""
    import torch

    ref = as_list(reference)
    single = not isinstance(reference, (tuple, list))
    if single and type(candidate) is not torch.Tensor or not single and not isinstance(candidate, (tuple, list)):
        return Comparison(
            Status.OUTPUT_TYPE,
            f"returned {type(candidate).__name__}, expected "
            f"{'a plain torch.Tensor' if single else 'a tuple of tensors'}",
        )
    cand = as_list(candidate)
    if len(cand) != len(ref):
        return Comparison(Status.OUTPUT_COUNT, f"returned {len(cand)} outputs, expected {len(ref)}")
    for i, (c, r) in enumerate(zip(cand, ref)):
        if type(c) is not torch.Tensor:  # subclasses can fake comparisons through __torch_function__
            return Comparison(
                Status.OUTPUT_TYPE,
                f"output {i} is {type(c).__module__}.{type(c).__name__}, expected a plain torch.Tensor",
            )
        if c.device != r.device:
            return Comparison(Status.DEVICE_MISMATCH, f"output {i} on {c.device}, expected {r.device}")
        if c.dtype != r.dtype:
            return Comparison(Status.DTYPE_MISMATCH, f"output {i} is {c.dtype}, expected {r.dtype}")
        if c.shape != r.shape:
            return Comparison(
                Status.SHAPE_MISMATCH, f"output {i} has shape {tuple(c.shape)}, expected {tuple(r.shape)}"
            )
    return None


def _scale_rule(i: int, c, r, tol: float) -> Comparison:
    """One output under the output-scale rule (module docstring)."""
    bad, nonfinite, max_abs, max_rel, scale = _values(c.detach().reshape(-1), r.detach().reshape(-1), tol)
    if not bad:
        return Comparison(Status.CORRECT, "", max_abs, max_rel)
    return Comparison(
        Status.VALUE_MISMATCH,
        f"output {i}: {bad}/{c.numel()} elements off "
        f"(rtol={tol:g}, atol={tol:g} x output scale {scale:.3g}; max abs err {max_abs:.3g}"
        + (f"; {nonfinite} NaN/Inf where the reference is finite" if nonfinite else "")
        + ")",
        max_abs,
        max_rel,
    )


def _merge(worst: Comparison, part: Comparison) -> Comparison:
    """The first failure, or the pass with the largest errors (the bound's largest share kept for reporting)."""
    worst.max_abs, worst.max_rel = max(worst.max_abs, part.max_abs), max(worst.max_rel, part.max_rel)
    if part.share > worst.share or not worst.bound_ulps or part.status != Status.CORRECT:
        worst.share, worst.ulps, worst.eager_ulps, worst.bound_ulps = (
            part.share,
            part.ulps,
            part.eager_ulps,
            part.bound_ulps,
        )
    if part.status != Status.CORRECT:
        worst.status, worst.detail = part.status, part.detail
    return worst


def compare(candidate, reference, requested_tol: Optional[float] = None, tol_scale: float = 1.0) -> Comparison:
    """The output-scale rule against `reference`. tol_scale < 1 asks for part of the tolerance only (synthesis's
    conditioning margin; the verifier uses 1)."""
    error = _structure(candidate, reference)
    if error is not None:
        return error
    worst = Comparison(Status.CORRECT)
    for i, (c, r) in enumerate(zip(as_list(candidate), as_list(reference))):
        worst = _merge(worst, _scale_rule(i, c, r, tolerance(r.dtype, requested_tol) * tol_scale))
        if not worst.ok:
            break
    return worst


def unit_roundoff(dtype) -> Optional[float]:
    """Half the spacing of the dtype's numbers at 1; None where the differential rule does not judge (float64, which
    no wider type checks here, integers and bools)."""
    return UNIT_ROUNDOFF.get(str(dtype).removeprefix("torch."))


def relative_bound(dtype, eager_error: float, requested_tol: Optional[float] = None) -> float:
    """The largest error, relative to |exact| + scale, an output of `dtype` may have where eager's is `eager_error`:
    EAGER_FACTOR times eager's, and never below the dtype's floor (FLOOR_ULPS, capped by the tolerance)."""
    u = unit_roundoff(dtype)
    floor = min(FLOOR_ULPS[str(dtype).removeprefix("torch.")] * u, tolerance(dtype, requested_tol))
    return max(EAGER_FACTOR * eager_error, floor)


def _exact_scale(x):
    """Root mean square of the exact reference's finite values, ZERO_SCALE where they are all zero (a 0-d float64
    tensor on the device)."""
    import torch

    rms = finite_rms(x)
    return torch.where(rms > 0, rms, ZERO_SCALE)


def _chunk_errors(c, e, x, scale, tol: float):
    """Per element of one chunk (float64): the candidate's and eager's errors against the exact reference over
    |exact| + scale (0 where not judged so), and which elements the differential rule cannot judge and fail: where
    eager is NaN/Inf, the candidate must equal it; where only the exact reference is, the candidate is judged against
    eager by the output-scale rule; a NaN/Inf candidate where both are finite fails."""
    import torch

    fc, fe, fx = torch.isfinite(c), torch.isfinite(e), torch.isfinite(x)
    both = fe & fx
    denom = x.abs() + scale
    eager = torch.where(both, (e - x).abs() / denom, 0.0)
    judged = both & fc
    cand = torch.where(judged, (c - x).abs() / denom, 0.0)
    equal = (c == e) | (c.isnan() & e.isnan())
    off_eager = (c - e).abs()
    old_ok = torch.isfinite(off_eager) & (off_eager <= tol * (e.abs() + scale))
    odd = (~fe & ~equal) | (fe & ~fx & ~(old_ok | equal)) | (both & ~fc)
    return cand, eager, odd, both & ~fc


def _differential_values(c, e, x, tol: float):
    """(max candidate error, max eager error, elements failing outside the differential rule, NaN/Inf where both
    references are finite, max abs error, scale) of three flat tensors: one read from the device at the end."""
    import torch

    scale = _exact_scale(x)
    zero = torch.zeros((), dtype=torch.float64, device=x.device)
    worst_c, worst_e, odd, nonfinite, max_abs = (zero.clone() for _ in range(5))
    for start in range(0, c.numel(), CHUNK):
        part = slice(start, start + CHUNK)
        cw, ew, xw = (t[part].to(torch.float64) for t in (c, e, x))
        cand, eager, odd_part, nonfinite_part = _chunk_errors(cw, ew, xw, scale, tol)
        worst_c = torch.maximum(worst_c, cand.max())
        worst_e = torch.maximum(worst_e, eager.max())
        max_abs = torch.maximum(max_abs, (cand * (xw.abs() + scale)).max())
        odd += odd_part.sum()
        nonfinite += nonfinite_part.sum()
    values = torch.stack([worst_c, worst_e, odd, nonfinite, max_abs, scale]).tolist()
    return values[0], values[1], int(values[2]), int(values[3]), values[4], values[5]


def _count_over(c, x, scale: float, bound: float) -> int:
    """Elements whose error against the exact reference passes bound * (|exact| + scale) (for a failure's detail)."""
    import torch

    over = 0
    for start in range(0, c.numel(), CHUNK):
        cw, xw = (t[start : start + CHUNK].to(torch.float64) for t in (c, x))
        judged = torch.isfinite(cw) & torch.isfinite(xw)
        over += int((judged & ((cw - xw).abs() > bound * (xw.abs() + scale))).sum())
    return over


def _differential_rule(i: int, c, e, x, requested_tol: Optional[float]) -> Comparison:
    """One floating output under the differential rule (differential())."""
    tol = tolerance(e.dtype, requested_tol)
    c, e, x = (t.detach().reshape(-1) for t in (c, e, x))
    err_c, err_e, odd, nonfinite, max_abs, scale = _differential_values(c, e, x, tol)
    bound = relative_bound(e.dtype, err_e, requested_tol)
    u = unit_roundoff(e.dtype)
    result = Comparison(Status.CORRECT, "", max_abs, err_c, err_c / u, err_e / u, bound / u, err_c / bound, "float64")
    if err_c <= bound and not odd:
        return result
    over = odd + (_count_over(c, x, scale, bound) if err_c > bound else 0)
    result.status = Status.VALUE_MISMATCH
    result.detail = (
        f"output {i}: {over}/{c.numel()} elements off (error {err_c / u:.3g} ulp of {e.dtype} against the float64 "
        f"reference, eager's {err_e / u:.3g}; bound {bound / u:.3g} ulp = max({EAGER_FACTOR:g} x eager's, "
        f"floor), relative to |exact| + output scale {scale:.3g}; max abs err {max_abs:.3g}"
        + (f"; {nonfinite} NaN/Inf where the references are finite" if nonfinite else "")
        + ")"
    )
    return result


def differential(candidate, eager, exact, requested_tol: Optional[float] = None) -> Comparison:
    """The accuracy contract: the candidate's outputs against `exact`, the same program run in float64 on the same
    inputs, each no further from it than EAGER_FACTOR times eager's own error, and never held to less than the
    dtype's floor (relative_bound; errors relative to |exact| + the output's root mean square, or ZERO_SCALE where
    the output is exactly zero). Outputs no wider type can judge (float64, integers, bools), and every output when
    `exact` is None or does not pair with eager's outputs, are judged against eager by the output-scale rule (the
    Comparison's `rule` says which judged and why)."""
    import torch

    error = _structure(candidate, eager)
    if error is not None:
        return error
    cands, eagers = as_list(candidate), as_list(eager)
    exacts = as_list(exact) if exact is not None else None
    why = "no float64 reference" if exacts is None else ""

    def pairs(x, e) -> bool:
        return type(x) is torch.Tensor and (x.shape, x.device) == (e.shape, e.device)

    if exacts is not None and (len(exacts) != len(eagers) or not all(map(pairs, exacts, eagers))):
        why, exacts = "the float64 reference's outputs do not pair with eager's", None
    worst = Comparison(Status.CORRECT, rule="float64" if exacts is not None else f"output scale ({why})")
    for i, (c, e) in enumerate(zip(cands, eagers)):
        x = exacts[i] if exacts is not None else None
        if x is None or unit_roundoff(e.dtype) is None or not x.is_floating_point():
            part = _scale_rule(i, c, e, tolerance(e.dtype, requested_tol))
        else:
            part = _differential_rule(i, c, e, x, requested_tol)
        worst = _merge(worst, part)
        if not worst.ok:
            break
    return worst
