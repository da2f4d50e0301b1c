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

    total = torch.zeros((), dtype=torch.float64, device=r.device)
    count = torch.zeros((), dtype=torch.float64, device=r.device)
    for start in range(0, r.numel(), CHUNK):
        r64 = r[start : start + CHUNK].to(torch.float64)
        finite = torch.isfinite(r64)
        total += torch.where(finite, r64 * r64, 0.0).sum()
        count += finite.sum()
    tiny = torch.finfo(r.dtype).tiny if r.is_floating_point() else 0.0
    return torch.where(count > 0, total / count.clamp_min(1.0), 0.0).sqrt().clamp_min(tiny)


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
    observed), or the first outputs observed replayed whatever the inputs (compared on an evenly spaced sample of up
    to REPLAY_SAMPLE elements per output, kept on the CPU: paper-size outputs hold billions). `observe` compares them
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

    def observe(self, outs: list) -> None:
        import torch

        if self.constants is None:
            self.constants = [o.reshape(-1)[0].item() if o.numel() else 0 for o in outs]
        self.zeros = self.zeros and compare([torch.zeros_like(o) for o in outs], outs, self.tol).ok
        self.constant = (
            self.constant and compare([torch.full_like(o, c) for o, c in zip(outs, self.constants)], outs, self.tol).ok
        )
        samples = [o.reshape(-1)[:: max(1, o.numel() // self.REPLAY_SAMPLE)][: self.REPLAY_SAMPLE].cpu() for o in outs]
        if self.first is None:
            self.first = samples
        self.replays = self.replays and compare(self.first, samples, self.tol).ok
        self.sets += 1


def compare(candidate, reference, requested_tol: Optional[float] = None, tol_scale: float = 1.0) -> Comparison:
    """tol_scale < 1 asks for part of the tolerance only (synthesis's conditioning margin; the verifier uses 1)."""
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
    worst = Comparison(Status.CORRECT)
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
        tol = tolerance(r.dtype, requested_tol) * tol_scale
        bad, nonfinite, max_abs, max_rel, scale = _values(c.detach().reshape(-1), r.detach().reshape(-1), tol)
        worst.max_abs, worst.max_rel = max(worst.max_abs, max_abs), max(worst.max_rel, max_rel)
        if bad:
            return Comparison(
                Status.VALUE_MISMATCH,
                f"output {i}: {bad}/{c.numel()} elements off "
                f"(rtol={tol:g}, atol={tol:g} x output scale {scale:.3g}; max abs err {max_abs:.3g}"
                + (f"; {nonfinite} NaN/Inf where the reference is finite" if nonfinite else "")
                + ")",
                worst.max_abs,
                worst.max_rel,
            )
    return worst
