"""Triton's interpreter made to round as the GPU does: its float32 -> bfloat16 conversion truncates (rounds toward
zero), where a GPU's `.to(tl.bfloat16)` and PyTorch's `.to(torch.bfloat16)` round to the nearest, ties to even.
Every bfloat16 value a kernel stores would otherwise sit half an ulp low on average: a bf16 matmul's logits off by
an ulp in half their places, all toward zero, bias a cross-entropy over them by hundreds of times eager's error, and
the CPU verifier refuses a kernel the GPU computes right. A CPU worker installs this before any candidate runs."""

from __future__ import annotations

import numpy as np


def bf16_bits(values: np.ndarray) -> np.ndarray:
    """float32 values as the bits of the nearest bfloat16 (ties to even; NaN stays a quiet NaN), uint16."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = ((bits + (0x7FFF + ((bits >> 16) & 1))) >> 16).astype(np.uint16)
    nan = np.isnan(values)
    if np.any(nan):
        rounded[nan] = ((bits[nan] >> 16) | 0x0040).astype(np.uint16)
    return rounded


def round_to_nearest() -> None:
    """Patch the interpreter's casts (once) so float32 -> bfloat16 rounds to the nearest, ties to even."""
    import triton.language as tl
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    if getattr(builder.cast_impl, "rounds_to_nearest", False):
        return
    truncating = builder.cast_impl

    def cast_impl(self, src, dst_type):
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            return interpreter.TensorHandle(bf16_bits(src.data), tl.bfloat16)
        return truncating(self, src, dst_type)

    cast_impl.rounds_to_nearest = True
    builder.cast_impl = cast_impl
    # the fp_trunc/fp_ext lambdas look cast_impl up on the instance, so they take the patched one
