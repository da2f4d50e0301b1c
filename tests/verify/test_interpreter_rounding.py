"""The CPU verifier's Triton interpreter stores bfloat16 as a GPU does, rounding to the nearest (ties to even), not
toward zero as the interpreter alone does: bit for bit PyTorch's `.to(torch.bfloat16)`, ties, infinities, the
largest finite values, subnormals, signed zeros and NaN included."""

import torch
import triton
import triton.language as tl
from triton.runtime.interpreter import InterpreterBuilder

from drtriton_ray.verify.interpreter import round_to_nearest


@triton.jit
def store_bf16(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.store(y_ptr + i, tl.load(x_ptr + i, mask=i < n).to(tl.bfloat16), mask=i < n)


def stored(x: torch.Tensor) -> torch.Tensor:
    y = torch.empty(x.numel(), dtype=torch.bfloat16)
    store_bf16[(1,)](x, y, x.numel(), BLOCK=triton.next_power_of_2(x.numel()))
    return y


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a.view(torch.int16) == b.view(torch.int16)) | (a.isnan() & b.isnan())


def test_bfloat16_stores_round_to_nearest_even(monkeypatch):
    torch.manual_seed(0)
    special = [float("nan"), float("inf"), -float("inf"), 3.3895314e38, -3.3895314e38, 1e-40, -1e-40, 0.0, -0.0]
    ties = [1.0 + 2**-8, 1.0 + 3 * 2**-8, -(1.0 + 2**-8)]  # halfway: to the even neighbour
    x = torch.cat([torch.randn(2000) * 20, torch.tensor(special + ties)])
    want = x.to(torch.bfloat16)
    monkeypatch.setattr(InterpreterBuilder, "cast_impl", InterpreterBuilder.cast_impl)  # restored afterwards
    truncated = stored(x)
    assert not bitwise_equal(truncated, want).all()  # the interpreter alone: toward zero
    round_to_nearest()
    round_to_nearest()  # installing twice changes nothing
    assert bitwise_equal(stored(x), want).all()
