"""GPU-only: timing, speedups against eager and torch.compile, the per-problem reference-time cache."""

import pytest

from drtriton_ray.verify import Limits, Task, WorkerPool

pytestmark = pytest.mark.gpu


def test_timing_and_reference_cache(source, tmp_path):
    problem = source("problems", "relu").replace("SHAPE = (37, 53)", "SHAPE = (4096, 4096)")
    task = Task(problem, source("candidates", "good_relu"), name="relu-big")
    # two workers share the GPU: one measures the reference while the others verify; timing is exclusive
    with WorkerPool(
        "cuda", size=2, limits=Limits(task_timeout_s=300), name="gpu", reference_cache=str(tmp_path)
    ) as pool:
        verdicts = pool.verify([task] * 3)
        for v in verdicts:
            assert v.correct, (v.status, v.reason)
            assert v.candidate_ms > 0 and v.eager_ms > 0 and v.compile_ms > 0
            assert v.speedup_vs_eager == pytest.approx(v.eager_ms / v.candidate_ms)
            assert v.speedup_vs_compile == pytest.approx(v.compile_ms / v.candidate_ms)
            assert {"compile", "checks", "timing"} <= set(v.phases)
        assert len({(v.eager_ms, v.compile_ms) for v in verdicts}) == 1
        assert len(pool.reference_times) == 1 and len(pool.reference_log) == 1
        second = pool.verify([task])[0]
        assert second.correct and (second.eager_ms, second.compile_ms) == (verdicts[0].eager_ms, verdicts[0].compile_ms)
    assert len(list(tmp_path.glob("*.json"))) == 1
    with WorkerPool(
        "cuda", size=1, limits=Limits(task_timeout_s=300), name="gpu2", reference_cache=str(tmp_path)
    ) as pool:  # a later pool reads the times from disk
        third = pool.verify([task])[0]
        assert third.correct and third.eager_ms == verdicts[0].eager_ms and not pool.reference_log


def test_eager_only_reference_is_completed_when_compile_is_asked(source, tmp_path):
    """The RL job rewards speed against eager alone and skips torch.compile of each new problem; a later task that
    wants compile_ms gets the reference measured again, with compile, and the cache on disk is updated."""
    from dataclasses import replace

    task = Task(source("problems", "relu"), source("candidates", "good_relu"), name="relu", compile_reference=False)
    with WorkerPool(
        "cuda", size=1, limits=Limits(task_timeout_s=300), name="gpu", reference_cache=str(tmp_path)
    ) as pool:
        eager_only = pool.verify([task])[0]
        assert eager_only.correct and eager_only.eager_ms > 0 and eager_only.compile_ms is None
        assert eager_only.speedup_vs_eager > 0 and eager_only.speedup_vs_compile is None
        assert pool.verify([task])[0].eager_ms == eager_only.eager_ms and len(pool.reference_log) == 1
        full = pool.verify([replace(task, compile_reference=True)])[0]
        assert full.compile_ms > 0 and len(pool.reference_log) == 2
    with WorkerPool(
        "cuda", size=1, limits=Limits(task_timeout_s=300), name="gpu2", reference_cache=str(tmp_path)
    ) as pool:
        again = pool.verify([replace(task, compile_reference=True)])[0]
        assert again.compile_ms == full.compile_ms and not pool.reference_log


def test_large_problem_is_checked_alone(source):
    """A problem whose trial needs more than a quarter of the GPU (checks.BIG_SHARE) runs its checks alone and is
    verified in full: one input of 5% of the GPU's memory (the self-test holds five such tensors at its peak)."""
    import torch

    n = torch.cuda.get_device_properties(0).total_memory // 20 // 4
    problem = source("problems", "relu").replace("SHAPE = (37, 53)", f"SHAPE = ({n // 4096}, 4096)")
    small = Task(source("problems", "relu"), source("candidates", "good_relu"), name="small", timing=False)
    large = Task(problem, source("candidates", "good_relu"), name="large", timing=False)
    with WorkerPool("cuda", size=2, limits=Limits(task_timeout_s=300), name="gpu-big") as pool:
        big, little = pool.verify([large, small])
    assert big.correct and little.correct, (big.reason, little.reason)
    assert "checked alone on the GPU (large problem)" in big.checks[0].detail
    assert "alone" not in little.checks[0].detail
