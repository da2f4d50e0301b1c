"""Whether a reference can judge candidates on given inputs: only where every correct float32 kernel matches it.

A correct kernel need not round like PyTorch: it sums in another order, fuses, keeps intermediates in registers.
Backward error analysis says such a kernel returns the exact result of inputs and intermediates perturbed by a few
rounding errors. So the reference is judged usable on some inputs when its outputs are
- finite,
- within 1/CONDITIONING_MARGIN of the tolerance of its own float64 evaluation (PyTorch's rounding is small), and
- within that again of themselves with every float input and intermediate perturbed by ULPS float32 rounding errors
  (RoundingNoise: another kernel's rounding is small too). PyTorch's float64 check alone misses data where PyTorch
  happens to be exact and a kernel is not: a batch norm of two nearly equal values at an offset of 1e4, where a
  kernel's mean, (x1 + x2) / 2, rounds at 1e-3 while Welford's does not.
Large-magnitude inputs (the verifier's stress distributions) need this: at unit scale, synthesis already guarantees
it for every program it emits."""

from __future__ import annotations

from typing import Optional

import torch
from torch.overrides import TorchFunctionMode

from drtriton_ray.verify.compare import CONDITIONING_MARGIN, as_list, compare

ULPS = 2.0  # perturbation, in float32 rounding errors
EPS = 2.0**-24  # float32's unit roundoff


class RoundingNoise(TorchFunctionMode):
    """Every new floating tensor a torch function computes (not views, not in-place results) comes out multiplied by
    1 + u, u uniform in +-ULPS float32 rounding errors. Half-precision values round back to themselves: a
    half-precision reference rounds at every operator anyway, and the float64 comparison judges it."""

    def __init__(self, gen: torch.Generator):
        super().__init__()
        self.gen = gen

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if type(out) is not torch.Tensor or not out.is_floating_point() or out.numel() == 0:
            return out
        storage = out.untyped_storage().data_ptr()
        if any(
            isinstance(a, torch.Tensor) and a.untyped_storage().data_ptr() == storage
            for a in (*args, *(kwargs or {}).values())
        ):
            return out  # a view, or an in-place result
        return jitter(out, self.gen)


class Headroom(TorchFunctionMode):
    """The largest finite magnitude among the floating tensors torch functions compute (a device tensor: no sync per
    operator; one temporary of each tensor's size at a time, as it runs on every trial's reference). Beyond
    sqrt(float32 max), about 1.8e19, a correct kernel may overflow where PyTorch does not: a variance's squares, a
    norm, a two-pass sum, where PyTorch's own kernel (Welford, scaled norms) stays finite."""

    LIMIT = torch.finfo(torch.float32).max ** 0.5

    def __init__(self):
        super().__init__()
        self.peak = None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if type(out) is torch.Tensor and out.is_floating_point() and out.numel():
            m = out.detach().abs().nan_to_num_(nan=0.0, posinf=0.0, neginf=0.0).amax().float()
            self.peak = m if self.peak is None else torch.maximum(self.peak, m)
        return out

    def exceeded(self) -> bool:
        return self.peak is not None and bool(self.peak > self.LIMIT)


def jitter(t: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    u = torch.rand(t.shape, generator=gen, device=t.device, dtype=torch.float32) * 2 - 1
    return (t.float() * (1 + ULPS * EPS * u)).to(t.dtype)


def _float64(inputs: list) -> list:
    return [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]


def judged_outputs(model, wide, inputs: list, tol: Optional[float], seed: int, device: str) -> Optional[list]:
    """The reference's outputs on `inputs` if a correct float32 kernel can match them there (module docstring), else
    None. `model` runs twice on copies of the inputs, `wide` (a float64 copy of it) once. Running out of memory is
    raised; any other failure (an operator without a float64 kernel) gives None."""
    gen = torch.Generator(device=device).manual_seed(seed)
    try:
        with torch.no_grad():
            got = as_list(model(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]))
            want = as_list(wide(*_float64(inputs)))
            noisy_inputs = [
                jitter(x, gen) if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs
            ]
            with RoundingNoise(gen):
                noisy = as_list(model(*noisy_inputs))
        if device.startswith("cuda"):
            torch.cuda.synchronize()
    except Exception as e:
        if isinstance(e, (MemoryError, torch.OutOfMemoryError)):
            raise
        return None
    if any(g.is_floating_point() and not bool(torch.isfinite(g).all()) for g in got):
        return None
    margin = 1 / CONDITIONING_MARGIN
    if not compare(got, [w.to(g.dtype) for w, g in zip(want, got)], tol, tol_scale=margin).ok:
        return None
    return got if compare(noisy, got, tol, tol_scale=margin).ok else None
