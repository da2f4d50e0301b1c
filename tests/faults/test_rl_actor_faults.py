"""Faults in the RL topology (real Ray, real actors): a rollout engine killed mid-run is restarted by Ray and
brought back to the trainer's latest weights before it generates again; a verifier actor killed in the middle of
a batch is restarted and the batch is verified on the new one. Generation never stops."""

import asyncio
import time

import pytest

from drtriton_ray.lower.emit import lower_source
from drtriton_ray.models import load_model, prepare_model
from drtriton_ray.rl.config import RLConfig
from drtriton_ray.rollout.engine import pack_buckets
from drtriton_ray.rollout.sync import call_with_restarts
from drtriton_ray.synth import Sampler, SynthConfig
from drtriton_ray.verify.task import Task


@pytest.fixture(scope="module")
def topology(ray_local, tmp_path_factory):
    from drtriton_ray.rl.topology import build_actors, shutdown

    tiny = str(prepare_model("tiny", tmp_path_factory.mktemp("models") / "tiny", seed=7))
    cfg = RLConfig(
        model={"path": tiny},
        synth={"num_cpus": 0.1},
        rollout={
            "engine": "hf",
            "num_cpus": 0.25,
            "group_size": 2,
            "max_tokens": 16,
            "prompts_in_flight": 1,
            "static_cache": True,
            "max_model_len": 512,
        },  # gpu-1's engine
        verify={"num_cpus": 0.25},
        algo={"prompts_per_step": 1},
        run={"storage_path": str(tiny)},
    )
    actors = build_actors(cfg)
    yield cfg, actors
    shutdown(actors)


def take(ray, buffer, version: int, timeout: float = 300):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = ray.get(buffer.take.remote(1, version))
        if got:
            return got[0]
        time.sleep(0.2)
    raise AssertionError("no group reached the buffer")


def test_killed_engine_restarts_with_latest_weights(topology, ray_local):
    ray = ray_local
    cfg, actors = topology
    gen, buffer, engine = actors["generator"], actors["buffer"], actors["engines"][0]
    ray.get(gen.start.remote(1, None))
    assert take(ray, buffer, 0).weight_version == 0

    model, _ = load_model(cfg.model.path)
    for p in model.parameters():
        p.data.mul_(0.5)
    sd = model.state_dict()
    ray.get(actors["pool"].sync_weights.remote([ray.put(b) for b in pack_buckets(sd, 1 << 20)], 1, list(sd)))
    ray.kill(engine, no_restart=False)  # Ray restarts it with its start-up weights (version 0)

    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:  # groups in flight at the kill may still say version 0
        group = take(ray, buffer, 1)
        if group.weight_version == 1:
            break
    assert group.weight_version == 1
    assert ray.get(engine.weight_version.remote()) == 1
    stats = ray.get(gen.stats.remote())
    assert stats.get("engine_resyncs", 0) + stats.get("engine_failures", 0) >= 1
    assert stats.get("generator_errors", 0) == 0


def test_killed_verifier_restarts_and_the_batch_completes(topology, ray_local):
    ray = ray_local
    _, actors = topology
    gen, verifier = actors["generator"], actors["verifiers"][0]
    record = Sampler(SynthConfig(level=1), 0).sample(3)
    tasks = [Task(record.source, lower_source(record.source), name="good")]
    pending = gen.verify.remote(tasks)
    time.sleep(2.0)  # the actor is starting its worker pool or verifying
    ray.kill(verifier, no_restart=False)
    verdicts = ray.get(pending, timeout=600)
    assert [v.status for v in verdicts] == ["correct"], verdicts[0].reason
    # a fresh actor (and pool) answered; this handle may learn of the restart after the generator's did, and Ray
    # then answers "unavailable" until it has
    assert asyncio.run(call_with_restarts(lambda: verifier.replacements.remote())) == 0


def test_trainer_gives_up_on_prompts_that_keep_failing(ray_local, tmp_path):
    """An engine that fails every call (here killed for good; on the GPU, out of memory beside the trainer) fails
    prompt after prompt: the trainer's wait gives up with the generator's last error (Ray Train then restarts the
    trainer) instead of waiting forever. A wait that outlasts the budget ends with no step."""
    from drtriton_ray.rl.topology import build_actors, shutdown
    from drtriton_ray.rl.controller import GenerationStalled, wait_for_groups

    ray = ray_local
    tiny = str(prepare_model("tiny", tmp_path / "tiny", seed=7))
    cfg = RLConfig(
        model={"path": tiny},
        synth={"num_cpus": 0.1},
        rollout={
            "engine": "hf",
            "num_cpus": 0.25,
            "group_size": 2,
            "max_tokens": 16,
            "prompts_in_flight": 1,
            "restart_wait_s": 1,
        },
        verify={"num_cpus": 0.25},
        algo={"prompts_per_step": 1},
        run={"storage_path": str(tmp_path), "max_failed_prompts": 3},
    )
    actors = build_actors(cfg)
    try:
        gen, buffer = actors["generator"], actors["buffer"]
        t0 = time.monotonic()
        assert wait_for_groups(buffer, gen, 1, 0, time.time() + 1.0, 3) is None  # nothing is generating
        assert time.monotonic() - t0 < 60
        ray.kill(actors["engines"][0], no_restart=True)
        ray.get(gen.start.remote(1, None))
        t0 = time.monotonic()
        with pytest.raises(GenerationStalled, match=r"\d+ prompts in a row failed .*Actor(Died|Unavailable)?Error"):
            wait_for_groups(buffer, gen, 1, 0, None, 3)
        assert time.monotonic() - t0 < 120
        assert ray.get(gen.stats.remote())["prompts_failed_in_a_row"] >= 3
    finally:
        shutdown(actors)
