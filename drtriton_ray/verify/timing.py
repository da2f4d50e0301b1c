"""GPU timing: CUDA events around each call, L2 flush before each trial, fresh inputs per trial, median of N,
device-wide synchronisation (all streams) before a trial ends, and a host-clock cross-check that catches work
left running on side streams or threads. On CPU nothing is measured (the interpreter says nothing about speed).

Every torch/time function used here is bound at import, which happens in the worker before any candidate."""
from __future__ import annotations

import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Optional

import torch

L2_FLUSH_BYTES = 256 << 20   # larger than any current GPU's L2 (H100 50 MB, B200 126 MB)
SPEEDUP_FLAG = 10.0          # above this a speedup is flagged for review (KernelBench)

_perf_counter = time.perf_counter
_synchronize = torch.cuda.synchronize
_Event = torch.cuda.Event


@dataclass
class Timing:
    median_ms: float
    event_ms: float
    host_ms: float
    host_suspect: bool    # host time far above event time: unsynchronised work, the host time is used


def measure(fn: Callable, make_args: Callable[[], list], trials: int = 20, warmup: int = 3) -> Timing:
    """Median time of fn(*make_args()) on the current CUDA device; make_args runs outside the timed region."""
    flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.float32, device="cuda")
    with torch.no_grad():
        for _ in range(warmup):
            fn(*make_args())
        _synchronize()
        events, hosts = [], []
        for _ in range(max(trials, 20)):
            args = make_args()
            flush.zero_()
            _synchronize()
            start, end = _Event(enable_timing=True), _Event(enable_timing=True)
            t0 = _perf_counter()
            start.record()
            fn(*args)
            end.record()
            _synchronize()          # device-wide: waits for every stream, not just the current one
            hosts.append((_perf_counter() - t0) * 1e3)
            events.append(start.elapsed_time(end))
    event_ms, host_ms = statistics.median(events), statistics.median(hosts)
    # The host clock includes ~10-50 us of launch and sync overhead; far beyond that means the events missed work.
    suspect = host_ms > 2.0 * event_ms + 0.1
    return Timing(host_ms if suspect else event_ms, event_ms, host_ms, suspect)


def reference_times(model, make_args, trials: int, warmup: int) -> dict:
    """Eager and torch.compile times of the reference (the pool caches them per problem and GPU model)."""
    eager = measure(model, make_args, trials, warmup).median_ms
    compiled = torch.compile(model)
    compiled_ms = measure(compiled, make_args, trials, warmup).median_ms
    return {"eager_ms": eager, "compile_ms": compiled_ms}


def speedup(ref_ms: Optional[float], cand_ms: Optional[float]) -> Optional[float]:
    if ref_ms is None or not cand_ms:
        return None
    return ref_ms / cand_ms


@contextmanager
def kernel_clock(enabled: bool):
    """Device time spent in kernels inside the block (torch profiler, CUDA activity); yields a dict filled on exit."""
    result: dict = {"gpu_kernel_ms": None}
    if not enabled:
        yield result
        return
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        yield result
    _synchronize()
    total_us = sum(getattr(e, "self_device_time_total", 0.0) for e in prof.key_averages())
    result["gpu_kernel_ms"] = total_us / 1e3
