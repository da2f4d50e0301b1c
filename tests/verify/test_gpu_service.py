"""GPU-only: the verifier as the RL job runs it, a Ray actor holding a share of the GPU whose pool workers are its
child processes (the first GPU RL run found every Triton compile refused there, never in a plain pool)."""

import pytest

from drtriton_ray.verify import Limits, Task

pytestmark = pytest.mark.gpu


def test_verifier_actor_compiles_and_times(ray_local, source):
    from drtriton_ray.verify.service import GPUVerifier

    actor = GPUVerifier.options(num_cpus=1, num_gpus=0.5).remote("cuda", 2, 100, Limits(task_timeout_s=300))
    try:
        good = Task(source("problems", "relu"), source("candidates", "good_relu"), name="good")
        verdicts = ray_local.get(actor.verify.remote([good, good]))
        for v in verdicts:
            assert v.correct, (v.status, v.reason)
            assert v.device.startswith("cuda") and v.candidate_ms > 0 and v.eager_ms > 0
    finally:
        ray_local.get(actor.close.remote())
        ray_local.kill(actor)
