"""Trial inputs: the problem's own get_inputs() plus hidden value distributions, each under a fresh seed.

KernelBench's torch.rand inputs are all in [0, 1): a candidate that skips ReLU (or abs, or a clamp at 0) passes
on them. The hidden distributions are signed and span several orders of magnitude, but keep the problem's shapes,
dtypes and integer tensors (indices, sizes) exactly as get_inputs() made them.

The stress distributions take a scale S that the verifier picks per problem (checks.py: the largest of
STRESS_SCALES at which the reference stays finite and well-conditioned in its dtype), because no one magnitude suits
every problem (exp(100) is finite in float32, exp(1e4) is not):
- `large`: signed normal values of standard deviation S. A softmax or logsumexp that does not subtract the maximum,
  or a log(1 + exp(x)) without its linear branch, overflows where the reference does not.
- `offset`: S * (1 + 1e-3 * normal), a large common offset around a small spread. A variance computed as
  E[x^2] - E[x]^2 cancels catastrophically, and a long sum accumulated in half precision overflows or loses the
  spread, where PyTorch (two-pass or Welford, float32 accumulation) stays exact."""

from __future__ import annotations

import copy


def free_cache(device: str) -> None:
    """Hand the allocator's cached blocks back to the driver: other processes share the GPU (a verifier pool's
    workers; the synthesizer's validation runs next to verifiers)."""
    if device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()


STRESS_SCALES = (1e4, 1e3, 1e2, 1e1)  # tried largest first
OFFSET_SPREAD = 1e-3  # the offset distribution's spread relative to its offset


def make_inputs(get_inputs, distribution: str, seed: int, device: str, scale: float = 1.0) -> list:
    """get_inputs() runs with `device` as torch's default device, so its factory calls (torch.randn(...)) draw
    straight on the GPU: a 4096x4096 input drawn on one CPU thread and copied costs ~0.1 s, several times per task.
    Hidden distributions are redrawn on the device too, from their own generator."""
    import torch

    torch.manual_seed(seed)
    with torch.device(device):
        values = list(get_inputs())
    gen = torch.Generator(device=device).manual_seed(seed + 1)
    out = []
    for v in values:
        if isinstance(v, torch.Tensor):
            v = v.to(device)
            if v.is_floating_point():
                v = _redraw(v, distribution, gen, scale)
        out.append(v)
    return out


def _redraw(t, distribution: str, gen, scale: float = 1.0):
    import torch

    if distribution == "problem":
        return t
    if distribution == "large":
        return (torch.randn(t.shape, generator=gen, device=t.device) * scale).to(t.dtype)
    if distribution == "offset":
        noise = torch.randn(t.shape, generator=gen, device=t.device)
        return (scale * (1.0 + OFFSET_SPREAD * noise)).to(t.dtype)
    if distribution == "normal_wide":
        # Signed normal values scaled elementwise by 10^U(-2, 1.5): mixed magnitudes in one tensor.
        scale = torch.pow(10.0, torch.empty(t.shape, device=t.device).uniform_(-2.0, 1.5, generator=gen))
        return (torch.randn(t.shape, generator=gen, device=t.device) * scale).to(t.dtype)
    if distribution == "uniform_signed":
        return torch.empty(t.shape, device=t.device).uniform_(-3.0, 3.0, generator=gen).to(t.dtype)
    raise ValueError(f"unknown input distribution {distribution!r}")


def clone_inputs(values: list) -> list:
    """Independent copies: the candidate and the reference never share input storage."""
    import torch

    return [v.detach().clone() if isinstance(v, torch.Tensor) else copy.deepcopy(v) for v in values]


def inputs_unchanged(before: list, after: list) -> bool:
    import torch

    for b, a in zip(before, after):
        if isinstance(b, torch.Tensor):
            if not (
                type(a) is torch.Tensor
                and a.shape == b.shape
                and a.dtype == b.dtype
                and a.device == b.device
                and torch.equal(a.detach(), b.detach())
            ):
                return False
    return True
