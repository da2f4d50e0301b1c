"""timing.measure's logic on CPU: CUDA events, synchronisation and the host clock replaced by a virtual clock that
only the fake kernels move (the GPU tests check the real thing), so the numbers are exact whatever the machine's load.
Window sizing, the lead call, fresh inputs per call, the exclusive section, and the host-clock cross-check."""

import pytest

from drtriton_ray.verify import timing


class Clock:
    """Seconds that pass only when a fake kernel runs (spin) or a fake synchronisation waits."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, ms: float) -> None:
        self.now += ms / 1e3


CLOCK = Clock()


class FakeEvent:
    def __init__(self, enable_timing=True):
        self.t = None

    def record(self):
        self.t = CLOCK()

    def elapsed_time(self, other):
        return (other.t - self.t) * 1e3


def spin(ms: float) -> None:
    CLOCK.advance(ms)


@pytest.fixture
def fake_cuda(monkeypatch):
    state = {"sync_ms": 0.0}
    monkeypatch.setattr(timing, "_Event", FakeEvent)
    monkeypatch.setattr(timing, "_perf_counter", CLOCK)
    monkeypatch.setattr(timing, "_synchronize", lambda: spin(state["sync_ms"]))
    monkeypatch.setattr(timing, "DEVICE", "cpu")
    monkeypatch.setattr(timing, "L2_FLUSH_BYTES", 1 << 12)
    return state


def counting(ms: float):
    seen, made = [], []

    def fn(*args):
        seen.append(id(args[0]))
        spin(ms)

    def make_args():
        made.append(object())
        return [made[-1]]

    return fn, make_args, seen, made


def test_short_calls_are_timed_in_windows_with_a_lead_call(fake_cuda):
    fn, make_args, seen, made = counting(0.25)
    entered = []

    def section(name):
        class Section:
            def __enter__(self):
                entered.append((name, len(seen)))

            def __exit__(self, *exc):
                entered.append((f"/{name}", len(seen)))

        return Section

    t = timing.measure(
        fn, make_args, trials=20, warmup=2, warmup_ms=0, exclusive=section("exclusive"), first=section("shared")
    )
    # the first (compiling) call and the warm-up ran in the shared section, the re-warm, the probe and the trials in
    # the exclusive one
    assert entered[:4] == [("shared", 0), ("/shared", 1), ("shared", 1), ("/shared", 3)]
    assert entered[4] == ("exclusive", 3) and entered[5][0] == "/exclusive" and len(entered) == 6
    assert 2 <= t.calls <= timing.MAX_CALLS and t.trials == 20
    assert t.median_ms == pytest.approx(0.25) and not t.host_suspect  # the virtual clock: exact
    assert len(set(seen)) == len(seen)  # every call had its own freshly made inputs


def test_long_calls_one_per_trial(fake_cuda):
    fn, make_args, seen, _ = counting(2.5)
    t = timing.measure(fn, make_args, trials=20, warmup=1, warmup_ms=0)
    assert t.calls == 1 and t.trials == 20
    # first call, warm-up, re-warm, a call per trial (no lead): the probe's call is the first trial's
    assert len(seen) == 1 + 1 + timing.REWARM + 20
    assert t.median_ms == pytest.approx(2.5)


def test_a_probe_that_sizes_a_window_of_several_calls_is_not_a_trial(fake_cuda):
    fn, make_args, seen, _ = counting(0.5)
    t = timing.measure(fn, make_args, trials=10, warmup=1, warmup_ms=0)
    assert t.calls == 4 and t.trials == 10
    # first call, warm-up, re-warm (batches of 1 and 2 calls of 0.5 ms: 1 ms), the probe's call, 10 windows of a
    # lead call and 4
    assert len(seen) == 1 + 1 + 3 + 1 + 10 * 5
    assert t.parts["probe"] == pytest.approx(0.5e-3)


def test_timing_says_where_its_seconds_go(fake_cuda):
    fn, make_args, _, _ = counting(2.5)
    t = timing.measure(fn, make_args, trials=10, warmup=1, warmup_ms=0)
    assert set(t.parts) == {"first", "warm", "premade", "rewarm", "probe", "inputs", "flush", "window"}
    # each step's calls of 2.5 ms: one first call, one warm-up call, the re-warm's, the probe's (the first trial), the
    # other 9 trials' windows
    for part, calls in (("first", 1), ("warm", 1), ("rewarm", timing.REWARM), ("probe", 1), ("window", 9)):
        assert t.parts[part] == pytest.approx(calls * 2.5e-3), part
    assert t.parts["inputs"] == t.parts["flush"] == t.parts["premade"] == 0.0  # no fake kernel runs there


def test_work_the_events_miss_makes_the_host_clock_the_measurement(fake_cuda):
    fn, make_args, _, _ = counting(0.3)
    fake_cuda["sync_ms"] = 3.0  # a side stream still busy when the end event fired
    t = timing.measure(fn, make_args, trials=20, warmup=1, warmup_ms=0, calls=4)
    assert t.host_suspect and t.median_ms == pytest.approx(t.host_ms) and t.median_ms > 2 * t.event_ms


def test_inductor_config_benchmarks_alone_hold_the_section(monkeypatch):
    """torch.compile's first call: its config benchmarks run in the section given, compiling around them does not,
    and the autotuner is as it was after the block, also when the block fails."""
    from contextlib import contextmanager

    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    events = []

    def benchmark(self, *args):
        events.append(("benchmark", args))
        return {"config": 1.0}

    @contextmanager
    def section():
        events.append("enter")
        yield
        events.append("exit")

    monkeypatch.setattr(CachingAutotuner, "benchmark_all_configs", benchmark)
    tuner = object.__new__(CachingAutotuner)
    with timing.autotune_in(section):
        events.append("compiling")
        assert CachingAutotuner.benchmark_all_configs(tuner, 7) == {"config": 1.0}
    assert events == ["compiling", "enter", ("benchmark", (7,)), "exit"]
    assert CachingAutotuner.benchmark_all_configs is benchmark
    with pytest.raises(RuntimeError), timing.autotune_in(section):
        raise RuntimeError("a compile error")
    assert CachingAutotuner.benchmark_all_configs is benchmark


def test_the_warm_up_of_long_calls_stops_soon_after_its_time(fake_cuda):
    """The host sees the GPU's work at synchronisations only: calls longer than the warm-up's 25 ms are not queued
    16 at a time before the clock is read."""
    fn, make_args, seen, _ = counting(15.0)
    t = timing.measure(fn, make_args, trials=10, warmup=2, warmup_ms=25.0)
    assert t.parts["warm"] == pytest.approx(2 * 15e-3)  # a batch of 1 (15 ms < 25 ms), then one more of 1
    assert t.parts["rewarm"] == pytest.approx(15e-3)
    assert len(seen) == 1 + 2 + 1 + 10  # the probe's call is the first of the 10 trials


def test_the_warm_up_holds_the_shared_section_a_batch_at_a_time(fake_cuda):
    """Short calls warm up in batches of 1, 2, 4 ..., doubled while the doubled batch takes at most WARM_HOLD_MS,
    each holding the section alone, so a worker waiting to time waits for one batch; the seconds spent waiting for
    the section (another worker timing) are not warm-up."""
    fn, make_args, seen, _ = counting(0.4)
    holds = []

    class Shared:
        def __enter__(self):
            spin(5.0)  # waiting for the grant: no call of ours runs
            holds.append(len(seen))

        def __exit__(self, *exc):
            pass

    t = timing.measure(fn, make_args, trials=10, warmup=2, warmup_ms=25.0, warm=Shared, first=lambda: Shared())
    # the first call's hold, then batches of 1, 2, 4, 8 (3.2 ms: its double would pass WARM_HOLD_MS) and 6 more of
    # 8 calls: 63 calls of 0.4 ms, past 25 ms of work
    assert timing.WARM_HOLD_MS == 4.0
    assert [b - a for a, b in zip(holds[1:], holds[2:] + [holds[1] + 63])] == [1, 2, 4] + [8] * 7
    assert t.parts["warm"] == pytest.approx(63 * 0.4e-3)


def sections(seen: list, made: list):
    """Sections that log (name, calls so far, input sets made so far) on entry and exit."""
    log = []

    def section(name):
        class Section:
            def __enter__(self):
                log.append((name, len(seen), len(made)))

            def __exit__(self, *exc):
                log.append((f"/{name}", len(seen), len(made)))

        return Section

    return log, section


def test_the_inputs_of_tiny_calls_are_made_before_the_exclusive_section(fake_cuda):
    """Windows of tiny kernels take MAX_CALLS + 1 fresh input sets each: making them is host work that need not keep
    the other workers off the GPU, so they are made beforehand in the shared section, a few holds of it."""
    fn, make_args, seen, made = counting(0.01)
    log, section = sections(seen, made)
    t = timing.measure(
        fn, make_args, trials=10, warmup=1, warmup_ms=0, exclusive=section("exclusive"), first=section("shared")
    )
    assert t.calls == timing.MAX_CALLS and t.trials == 10
    start = next(k for k, e in enumerate(log) if e[0] == "exclusive")
    end = len(log) - 1
    made_before = log[start][2]
    # made while exclusive: the re-warm's only (it lasts REWARM_MS whatever its calls cost), not the windows'
    assert log[end][0] == "/exclusive"
    assert log[end][2] - made_before == round(t.parts["rewarm"] / 0.01e-3)
    assert made_before >= 10 * (timing.MAX_CALLS + 1) + 1  # the windows' and the probe's
    shared_holds = [e for e in log[:start] if e[0] == "shared"]
    assert len(shared_holds) >= 1 + 1 + made_before // timing.PREMADE_HOLD  # first call, warm-up, the making
    assert len(set(seen)) == len(seen)  # still: every call its own inputs, each set used once
    assert t.median_ms == pytest.approx(0.01)


def test_inputs_too_large_to_hold_at_once_are_made_per_trial(fake_cuda, monkeypatch):
    import torch

    fn, _, seen, made = counting(0.01)

    def make_args():
        made.append(torch.empty(1 << 20, dtype=torch.uint8))  # 1 MiB a set
        return [made[-1]]

    monkeypatch.setattr(timing, "PREMADE_BYTES", 64 << 20)  # fewer than the ~330 sets the windows take
    log, section = sections(seen, made)
    t = timing.measure(
        fn, make_args, trials=10, warmup=1, warmup_ms=0, exclusive=section("exclusive"), first=section("shared")
    )
    enter = next(e for e in log if e[0] == "exclusive")
    assert log[-1][2] - enter[2] >= 10 * (t.calls + 1)  # made inside, per trial
    assert enter[2] <= 1 + 1 + 1  # first call, warm-up, and the one set that showed the size
    assert t.parts["inputs"] >= 0.0 and t.calls == timing.MAX_CALLS


def test_longer_calls_make_their_inputs_per_trial_as_the_probe_sizes_the_window(fake_cuda):
    fn, make_args, seen, made = counting(0.5)
    log, section = sections(seen, made)
    t = timing.measure(
        fn, make_args, trials=10, warmup=1, warmup_ms=0, exclusive=section("exclusive"), first=section("shared")
    )
    assert 1 < t.calls < timing.MAX_CALLS
    enter = next(e for e in log if e[0] == "exclusive")
    assert enter[2] == 2 and t.parts["premade"] == 0.0  # only the first call's and the warm-up's sets
