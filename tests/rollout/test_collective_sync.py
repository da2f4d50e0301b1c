"""Weight sync by collective broadcast (gloo here; NCCL takes the same path between GPUs) from the trainer's rank 0
(this process) to real engine actors: after a push the engine's greedy text is the trainer model's; an engine that
Ray restarted is out of the group, and the next push forms a new one and brings it up to date."""

import pytest
import torch

from drtriton_ray.models import load_model, prepare_model
from drtriton_ray.rollout.engine import SamplingConfig, plan_buckets


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return str(prepare_model("tiny", tmp_path_factory.mktemp("models") / "tiny", seed=17))


def test_plan_buckets_by_dtype_and_size():
    state = {
        "a": torch.zeros(4, 4),
        "b": torch.zeros(8),
        "c": torch.zeros(2, dtype=torch.bfloat16),
        "d": torch.zeros(100),
        "e": torch.zeros(3),
    }
    plan = plan_buckets(state, bucket_bytes=128)
    assert plan == [
        ["float32", [["a", [4, 4]], ["b", [8]]]],  # 96 B
        ["bfloat16", [["c", [2]]]],  # a dtype change starts a bucket
        ["float32", [["d", [100]]]],  # 400 B: a bucket of its own
        ["float32", [["e", [3]]]],
    ]


def perturbed(tiny: str, seed: int):
    model, tok = load_model(tiny)
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model, tok


def greedy_matches(ray, engine, model, tok, version: int) -> None:
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "def add(a, b):"}], add_generation_prompt=True, tokenize=True, return_dict=False
    )
    [[sample]] = ray.get(engine.generate.remote([prompt], SamplingConfig(n=1, temperature=0.0, max_tokens=12)))
    want = model.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False, pad_token_id=tok.eos_token_id)[
        0, len(prompt) :
    ].tolist()
    assert sample.token_ids == want[: len(sample.token_ids)] and sample.weight_version == version


def pool_for(ray, engine):
    """The RL job's engine pool actor, which owns the engine side of the sync."""
    from drtriton_ray.rollout.pool import EnginePool

    return ray.remote(num_cpus=0)(EnginePool).remote([engine])


@pytest.mark.parametrize("kind,options", [("hf", {}), ("vllm", {"max_model_len": 512, "kv_cache_bytes": 64 << 20})])
def test_broadcast_round_trip_and_restart(ray_local, tiny, kind, options):
    ray = ray_local
    from drtriton_ray.rollout.actor import rollout_actor
    from drtriton_ray.rollout.push import CollectivePush

    engine = rollout_actor(0.25, 0, 1).remote(kind, tiny, options)
    host = pool_for(ray, engine)
    pusher = CollectivePush(host, engines=1, bucket_bytes=1 << 20, backend="gloo", timeout_s=120, device="cpu")
    try:
        model, tok = perturbed(tiny, 0)
        state = model.state_dict()
        timings = ray.get(pusher.push(state, 1))
        assert timings["failed"] == 0 and timings["engine_update_s"] > 0 and pusher.groups_formed == 1
        assert len(plan_buckets(state, 1 << 20)) > 1  # several buckets, one broadcast each
        greedy_matches(ray, engine, model, tok, 1)
        if kind == "vllm":
            return  # the restart path is the engine-independent part
        ray.kill(engine, no_restart=False)  # Ray restarts it with its start-up weights, out of the group
        model, tok = perturbed(tiny, 1)
        timings = ray.get(pusher.push(model.state_dict(), 2))
        assert timings["failed"] == 0 and pusher.groups_formed == 2
        greedy_matches(ray, engine, model, tok, 2)
    finally:
        pusher.close()
        ray.get(engine.shutdown.remote())
        ray.kill(engine)
        ray.kill(host)


@pytest.mark.gpu
def test_nccl_broadcast_between_two_gpus(ray_local, tiny):
    """The NCCL path: the trainer's rank 0 here on one GPU, a transformers engine actor on another (NCCL refuses
    two ranks on one GPU, so this needs two)."""
    if torch.cuda.device_count() < 2:
        pytest.skip("NCCL needs two GPUs: it refuses two ranks on one")
    ray = ray_local
    from drtriton_ray.rollout.actor import rollout_actor
    from drtriton_ray.rollout.push import CollectivePush

    engine = rollout_actor(0.25, 1, 0).remote("hf", tiny, {"device": "cuda"})
    host = pool_for(ray, engine)
    gpu = ray.get(engine.__ray_call__.remote(lambda self: ray.get_gpu_ids()))[0]
    mine = next(i for i in range(torch.cuda.device_count()) if str(i) != str(gpu))
    pusher = CollectivePush(host, engines=1, bucket_bytes=1 << 20, backend="nccl", timeout_s=120, device=f"cuda:{mine}")
    try:
        model, tok = perturbed(tiny, 2)
        timings = ray.get(pusher.push({k: v.to(f"cuda:{mine}") for k, v in model.state_dict().items()}, 1))
        assert timings["failed"] == 0
        greedy_matches(ray, engine, model, tok, 1)
    finally:
        pusher.close()
        ray.kill(engine)
        ray.kill(host)
