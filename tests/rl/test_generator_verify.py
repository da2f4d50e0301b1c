"""The generator verifies the groups that finish together (one engine batch) in one verifier call, so the pool's
workers share them, and hands each group its own verdicts in order; verify.batch_tasks caps a call. Real Ray,
a real CPU verifier actor (interpreter), CP-SAT programs and their reference lowerings."""
import pytest

from drtriton_ray.lower.emit import lower_source
from drtriton_ray.models import prepare_model
from drtriton_ray.rl.config import RLConfig
from drtriton_ray.synth import Sampler, SynthConfig
from drtriton_ray.verify.task import Limits, Task


@pytest.fixture(scope="module")
def setup(ray_local, tmp_path_factory):
    from drtriton_ray.verify.service import CPUVerifier
    tiny = str(prepare_model("tiny", tmp_path_factory.mktemp("models") / "tiny", seed=11))
    verifier = CPUVerifier.options(num_cpus=0.5).remote("cpu", 1, 100, Limits(task_timeout_s=300))
    record = Sampler(SynthConfig(level=1), 0).sample(3)
    good = Task(record.source, lower_source(record.source), name="good")
    broken = Task(record.source, "this is not python", name="broken")
    yield ray_local, tiny, verifier, good, broken
    ray_local.get(verifier.close.remote())
    ray_local.kill(verifier)


def generator(ray, tiny, verifier, **verify):
    from drtriton_ray.rl.generator import Generator
    cfg = RLConfig(model={"path": tiny}, verify=verify)
    return ray.remote(num_cpus=0)(Generator).remote(cfg.model_dump(mode="json"), [], [verifier], None)


def test_groups_arriving_together_share_one_call(setup):
    ray, tiny, verifier, good, broken = setup
    gen = generator(ray, tiny, verifier)
    groups = [[good, broken], [broken], [good]]
    results = ray.get([gen.verify.remote(g) for g in groups], timeout=600)
    assert [[v.name for v in r] for r in results] == [["good", "broken"], ["broken"], ["good"]]
    assert [[v.correct for v in r] for r in results] == [[True, False], [False], [True]]
    assert ray.get(gen.stats.remote())["verify_calls"] == 1


def test_batch_tasks_caps_a_call(setup):
    ray, tiny, verifier, good, broken = setup
    gen = generator(ray, tiny, verifier, batch_tasks=2)
    results = ray.get([gen.verify.remote([t]) for t in (good, broken, good)], timeout=600)
    assert [r[0].correct for r in results] == [True, False, True]
    assert ray.get(gen.stats.remote())["verify_calls"] == 2
    with pytest.raises(ValueError, match="batch_tasks"):
        RLConfig(model={"path": tiny}, verify={"batch_tasks": 0})
