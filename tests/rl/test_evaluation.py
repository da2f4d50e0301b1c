"""The RL run's held-out evaluation (rl/evaluation.py): greedy answers from the job's engines through the engine pool,
verified on its verifier actors, scored by eval-model's own function. Real Ray, a transformers engine on the tiny
model, a CPU verifier actor."""

import pytest

from drtriton_ray.models import prepare_model
from drtriton_ray.rl.config import SynthSection
from drtriton_ray.verify.task import Limits


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return str(prepare_model("tiny", tmp_path_factory.mktemp("models") / "tiny", seed=19))


def test_heldout_evaluation_through_the_engine_pool(ray_local, tiny):
    ray = ray_local
    from drtriton_ray.eval.heldout import heldout_programs
    from drtriton_ray.models import load_tokenizer
    from drtriton_ray.rl.evaluation import HeldoutEvaluator
    from drtriton_ray.rollout.actor import rollout_actor
    from drtriton_ray.rollout.pool import EnginePool
    from drtriton_ray.verify.service import CPUVerifier

    engine = rollout_actor(0.25, 0, 0).remote("hf", tiny, {})
    verifier = CPUVerifier.options(num_cpus=0.25).remote("cpu", 1, 100, Limits(task_timeout_s=300))
    pool = ray.remote(num_cpus=0)(EnginePool).remote([engine])
    try:
        evaluator = HeldoutEvaluator(
            pool, [verifier], load_tokenizer(tiny), SynthSection(), max_tokens=16, baseline="eager", policy="strict"
        )
        result = evaluator.evaluate(1, 2)
        assert result["level"] == 1 and result["programs"] == 2 and 0.0 <= result["pass_at_1"] <= 1.0
        assert sum(result["outcomes"].values()) == 2  # one greedy answer a program
        # the programs are the held-out stream's first two, drawn once and kept
        assert [p.id for p in evaluator.programs[1]] == [p.id for p in heldout_programs(1, 2, "small", "float32")]
    finally:
        ray.get(verifier.close.remote())
        for actor in (pool, verifier, engine):
            ray.kill(actor)
