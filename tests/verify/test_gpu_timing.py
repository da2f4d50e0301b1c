"""GPU-only: timing, speedups against eager and torch.compile, the per-problem reference-time cache."""
import pytest

from drtriton_ray.verify import Limits, Task, WorkerPool

pytestmark = pytest.mark.gpu


def test_timing_and_reference_cache(source):
    problem = source("problems", "relu").replace("SHAPE = (37, 53)", "SHAPE = (4096, 4096)")
    task = Task(problem, source("candidates", "good_relu"), name="relu-big")
    with WorkerPool("cuda", size=1, limits=Limits(task_timeout_s=300), name="gpu") as pool:
        first = pool.verify(task)
        assert first.correct, (first.status, first.reason)
        assert first.candidate_ms > 0 and first.eager_ms > 0 and first.compile_ms > 0
        assert first.speedup_vs_eager == pytest.approx(first.eager_ms / first.candidate_ms)
        assert first.speedup_vs_compile == pytest.approx(first.compile_ms / first.candidate_ms)
        assert len(pool.reference_times) == 1
        second = pool.verify(task)
        assert second.correct and (second.eager_ms, second.compile_ms) == (first.eager_ms, first.compile_ms)
