"""GPU timing: CUDA events, a warm-up by count and by time, an L2 flush before each trial, fresh inputs for every
call, median of N trials, device-wide synchronisation (all streams) before a trial ends, and a host-clock
cross-check that catches work left running on side streams or threads. On CPU nothing is measured (the
interpreter says nothing about speed).

A trial times a *window* of `calls` back-to-back calls, each on its own freshly made inputs (made before the
flush, outside the timed region), and reports window / calls. With one call per trial a sub-millisecond kernel's
event time is mostly the host's launch latency (the GPU sits idle between the start event and the kernel until
Python has got through forward and Triton's launcher), and that latency moves with the host's state from one
repeat to the next: on an H100 a 0.074 ms kernel measured 0.11-0.16 ms, its median moving by 21-29% between
repeats. In a window the calls queue behind each other; a *lead call* launched just before the start event keeps
the GPU busy while the host records the start event and launches the first timed call, so not even that call
waits for the host. `calls` is chosen from a probe of one call (a window of about WINDOW_MS, at most MAX_CALLS,
input copies within WINDOW_BYTES); kernels of WINDOW_MS or more are timed one call per trial, without a lead.
Where the host cannot launch as fast as the GPU runs (kernels of ~10-30 us, heavy Python around the launch), the
window measures the launch rate, which is what such code costs, and stays as noisy as the host.

The host-clock cross-check spans the lead call and the window (an extra event before the lead call): work the
events miss (side streams, threads) shows up as host time far beyond event time, and the host time is used.

Every torch/time function used here is bound at import, which happens in the worker before any candidate."""

from __future__ import annotations

import math
import statistics
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

from drtriton_ray.verify.verdict import SPEEDUP_FLAG, speedup  # noqa: F401  (re-exported for callers)

L2_FLUSH_BYTES = 256 << 20  # larger than any current GPU's L2 (H100 50 MB, B200 126 MB)
WARMUP_MS = 25.0  # warm-up by time as well as by count (do_bench's 25 ms; 100 ms changed nothing)
WINDOW_MS = 2.0  # a trial's window of back-to-back calls lasts about this long
MAX_CALLS = 32  # calls per window at most
WINDOW_BYTES = 2 << 30  # input copies a window may hold at once
# Fewest trials a median is taken over. A search ranks many candidates with ~10 (its final answer is timed with the
# default 50): the timing section is exclusive, so every trial a candidate spends there is a trial no other worker
# of the GPU can run.
MIN_TRIALS = 8

DEVICE = "cuda"  # where the L2 flush buffer lives (tests run the logic on CPU with fake events)

_perf_counter = time.perf_counter
_synchronize = torch.cuda.synchronize
_Event = torch.cuda.Event


@dataclass
class Timing:
    median_ms: float  # the measurement: per call
    event_ms: float  # median of CUDA-event windows / calls
    host_ms: float  # median of host-clock windows / calls
    host_suspect: bool  # host time far above event time: unsynchronised work, the host time is used
    calls: int = 1  # calls per trial window
    trials: int = 0
    iqr_ms: float = 0.0  # inter-quartile range of the per-trial values (within-run noise)
    # host seconds by step, section waits left out: first, warm, premade (the trials' inputs made beforehand; shared
    # section); rewarm, probe, and the trials' inputs, flush and window (exclusive section)
    parts: dict = field(default_factory=dict)


@contextmanager
def _clock(parts: dict, name: str):
    t0 = _perf_counter()
    try:
        yield
    finally:
        parts[name] = parts.get(name, 0.0) + _perf_counter() - t0


def _nbytes(args: list) -> int:
    return sum(a.numel() * a.element_size() for a in args if isinstance(a, torch.Tensor))


def measure(
    fn: Callable,
    make_args: Callable[[], list],
    trials: int = 50,
    warmup: int = 10,
    warmup_ms: float = WARMUP_MS,
    calls: Optional[int] = None,
    lead: Optional[bool] = None,
    exclusive=nullcontext,
    first=nullcontext,
    warm=None,
) -> Timing:
    """Median per-call time of fn(*make_args()) on the current CUDA device; make_args runs outside the timed region.

    The first call (JIT compile, autotuning, torch.compile) runs in `first()` and the warm-up in `warm()` (default:
    `first`; the pool's shared GPU section, or nothing), before `exclusive()` is entered, and so are the trials' input
    sets where calls are short (`_premade`); a short re-warm, the probe and the trials run inside that (the pool's
    per-GPU timing section, which no other worker's kernels share: the shorter it is held, the more workers one GPU
    serves). `calls=None` picks the window size, `calls=1` times one call per trial; `lead=None` adds the lead call to
    windows of more than one call."""
    parts: dict = {}
    with torch.no_grad():
        with first(), _clock(parts, "first"):
            fn(*make_args())  # compile / autotune outside the exclusive section
            _synchronize()
        parts["warm"], per_call = _warm(fn, make_args, warmup, warmup_ms, warm or first)
        sets = _premade(make_args, _sets_needed(trials, calls, lead, per_call), warm or first, parts)
        with exclusive():
            # the re-warm lasts REWARM_MS whatever its calls cost, so its inputs are made as it goes
            parts["rewarm"] = _warm(fn, make_args, REWARM, REWARM_MS)[0]
            timing = _timed(fn, _taking(sets, make_args), trials, calls, lead, parts)
    timing.parts = parts
    return timing


# Input sets of short calls are made before the exclusive section, in the shared one, up to this many bytes: a window
# of tiny kernels takes MAX_CALLS + 1 fresh sets, and making them is host work (ms a candidate) that other workers'
# kernels could run beside.
PREMADE_BYTES = 512 << 20
PREMADE_HOLD = 64  # sets made per hold of the shared section


def _sets_needed(trials: int, calls: Optional[int], lead: Optional[bool], per_call_s: float) -> int:
    """Input sets the trials will take, where that is known before the probe: `calls` given, or calls so short (the
    warm-up's seconds per call, its inputs' making included, an upper bound) that the probe will size MAX_CALLS.
    Otherwise 0: the sets are made per trial, as the window's size is known."""
    if calls is None and per_call_s * 1e3 * MAX_CALLS > WINDOW_MS:
        return 0
    calls = calls or MAX_CALLS
    return max(trials, MIN_TRIALS) * (calls + int(calls > 1 if lead is None else lead)) + 1  # + the probe's


def _premade(make_args, count: int, section, parts: dict) -> list:
    """`count` input sets made in `section` (the shared one) a few holds at a time, all done on the GPU before each
    hold ends; none where they would pass PREMADE_BYTES (they are then made per trial, in the exclusive section)."""
    sets: list = []
    parts["premade"] = 0.0
    while len(sets) < count:
        with section(), _clock(parts, "premade"):
            for _ in range(min(PREMADE_HOLD, count - len(sets))):
                sets.append(make_args())
                if len(sets) == 1 and count * _nbytes(sets[0]) > PREMADE_BYTES:
                    sets.clear()
                    count = 0
                    break
            _synchronize()  # the making's kernels end inside the hold
    return sets


def _taking(sets: list, make_args):
    """make_args that hands out the premade sets first, each once, then makes fresh ones."""
    sets.reverse()

    def take():
        return sets.pop() if sets else make_args()

    return take


# Calls made again inside the exclusive section after the warm-up (other workers' kernels ran in between): at least
# one, and at least REWARM_MS of them. Every call here is GPU time no other worker of the GPU can use.
REWARM = 1
REWARM_MS = 1.0


# A warm-up batch grows while twice the last one would still take at most this long: long enough that a warm-up of
# short calls takes a few holds of the shared section (each a message to the pool and back), short enough that a
# worker waiting to time waits for little more than this.
WARM_HOLD_MS = 4.0
WARM_BATCH_MAX = 1024


def _warm(fn, make_args, warmup: int, warmup_ms: float, section=nullcontext) -> tuple[float, float]:
    """At least `warmup` calls and at least `warmup_ms` of back-to-back work. The host clock sees the work only at a
    synchronisation, so the calls go in batches of 1, 2, 4 ..., each followed by one, and a batch doubles only while the
    doubled one would take at most WARM_HOLD_MS: calls longer than the warm-up stop it after a few calls, where a fixed
    batch of 16 queued 16 of them (0.24 s of GPU a candidate at KernelBench sizes, for a 25 ms warm-up). Each batch
    holds `section` (the pool's shared one) alone, so a worker waiting to time waits for one batch, not for a whole
    warm-up; the time spent waiting for it is not warm-up. Returns the seconds of work and the seconds a call of the
    last batch took, its inputs' making included."""
    n, batch, worked = 0, 1, 0.0
    while n < warmup or worked < warmup_ms / 1e3:
        k = batch if worked < warmup_ms / 1e3 else warmup - n  # time is up: only the calls the count still asks
        with section():
            t0 = _perf_counter()
            for _ in range(k):
                fn(*make_args())
            _synchronize()
            seconds = _perf_counter() - t0
        worked += seconds
        n += k
        if 2 * seconds <= WARM_HOLD_MS / 1e3:
            batch = min(2 * batch, WARM_BATCH_MAX)
    return worked, seconds / max(k, 1)


def _timed(fn, make_args, trials, calls, lead, parts: dict) -> Timing:
    """The trials' windows. Unless `calls` is given, a probe window of one call sizes them; where one call fills a
    window (calls of WINDOW_MS or more, whose every call is seconds of exclusive GPU time over a search) the probe is
    the first trial, not a call spent on sizing alone."""
    with _clock(parts, "probe"):
        flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.float32, device=DEVICE)
        probe = None
        if calls is None:
            args = make_args()
            probe = _window(fn, [args], 0, flush)
            calls = _window_calls(probe[0], _nbytes(args))
            del args
    lead = int(calls > 1 if lead is None else lead)
    runs = [probe] if probe is not None and calls == 1 and not lead else []
    while len(runs) < max(trials, MIN_TRIALS):
        with _clock(parts, "inputs"):
            sets = [make_args() for _ in range(calls + lead)]  # fresh values and addresses for every call
        runs.append(_window(fn, sets, lead, flush, parts))
        del sets
    events, hosts, totals = (list(x) for x in zip(*runs))
    return _summary(events, hosts, totals, calls, lead)


def _window(fn, sets: list, lead: int, flush, parts: Optional[dict] = None) -> tuple[float, float, float]:
    """One trial: the L2 flushed, then the calls back to back on their own input sets (the first a lead call when
    `lead`); (event ms of the calls after the lead, host ms of all, event ms of all). `parts`: where the flush's and
    the window's seconds go (None: the caller clocks them)."""
    parts = {} if parts is None else parts
    with _clock(parts, "flush"):
        flush.zero_()
        _synchronize()
    with _clock(parts, "window"):
        first, start, end = (_Event(enable_timing=True) for _ in range(3))
        t0 = _perf_counter()
        first.record()
        if lead:
            fn(*sets[0])  # the lead call: the GPU runs it while the host starts the window
        start.record()
        for args in sets[lead:]:
            fn(*args)
        end.record()
        _synchronize()  # device-wide: waits for every stream, not just the current one
        host = (_perf_counter() - t0) * 1e3
    return start.elapsed_time(end), host, first.elapsed_time(end)


def _window_calls(one_ms: float, nbytes: int) -> int:
    """Calls per window: about WINDOW_MS of back-to-back calls of `one_ms` each, within MAX_CALLS and WINDOW_BYTES of
    input copies of `nbytes` each."""
    one = max(one_ms, 1e-3)
    return max(1, min(MAX_CALLS, math.ceil(WINDOW_MS / one), WINDOW_BYTES // max(nbytes, 1) - 1))


def _summary(events, hosts, totals, calls, lead) -> Timing:
    event_ms, host_ms, total_ms = (statistics.median(x) for x in (events, hosts, totals))
    # Host and events span the same calls (lead included); the host adds only the sync's return (~10-50 us).
    # Far beyond that, the events missed work (side streams, threads) and the host clock is the measurement.
    suspect = host_ms > 1.25 * total_ms + 0.1
    n = calls + lead
    if suspect:
        per_call, chosen = host_ms / n, [h / n for h in hosts]
    else:
        per_call, chosen = event_ms / calls, [e / calls for e in events]
    q = statistics.quantiles(chosen, n=4) if len(chosen) >= 4 else [chosen[0]] * 3
    return Timing(per_call, event_ms / calls, host_ms / n, suspect, calls, len(events), q[2] - q[0])


def reference_times(
    model,
    make_args,
    trials: int,
    warmup: int,
    exclusive=nullcontext,
    shared=nullcontext,
    compiling=nullcontext,
    with_compile: bool = True,
) -> dict:
    """Eager and (with_compile) torch.compile times of the reference (the pool caches them per problem and GPU
    model). The compiled module's first call compiles for seconds in `compiling()`: the pool's gate passes
    `autotune_in(exclusive)`, which holds no section while compiling, so other workers go on meanwhile, and the
    exclusive one around Inductor's config benchmarks (a problem too large to share the GPU passes its exclusive
    section for the whole call)."""
    eager = measure(model, make_args, trials, warmup, exclusive=exclusive, first=shared).median_ms
    if not with_compile:
        return {"eager_ms": eager, "compile_ms": None}
    compiled = torch.compile(model)
    compiled_ms = measure(
        compiled, make_args, trials, warmup, exclusive=exclusive, first=compiling, warm=shared
    ).median_ms
    return {"eager_ms": eager, "compile_ms": compiled_ms}


@contextmanager
def autotune_in(section):
    """Inductor's config benchmarks run in `section` (the pool's exclusive one) while the block runs.

    torch.compile's first call benchmarks each generated kernel's candidate configs where it has several (do_bench,
    tens of ms each). Outside the pool's sections those benchmarks share the GPU with other workers' kernels: they can
    slow another worker's timing and pick a config by the noise (torch.compile times of one program moved by up to
    3.7x between level-2 runs while eager times stayed within 30%). Only the benchmarks
    hold the section, not the seconds of compiling around them. Without Inductor's autotuner (another torch) the
    block runs as it is."""
    try:
        from torch._inductor.runtime.triton_heuristics import CachingAutotuner
    except ImportError:
        yield
        return
    original = CachingAutotuner.benchmark_all_configs

    def benchmark_all_configs(self, *args, **kwargs):
        with section():
            return original(self, *args, **kwargs)

    CachingAutotuner.benchmark_all_configs = benchmark_all_configs
    try:
        yield
    finally:
        CachingAutotuner.benchmark_all_configs = original


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
