"""Rollouts with vLLM's AsyncLLM: token ids in, token ids and sampled-token log-probs out; weight
updates paused, bucketed, followed by a prefix-cache reset."""

from __future__ import annotations

import asyncio
import time
import uuid

from drtriton_ray.rollout.engine import Sample, SamplingConfig
from drtriton_ray.rollout.vllm_ext import WeightSyncExtension

EXTENSION = f"{WeightSyncExtension.__module__}.{WeightSyncExtension.__name__}"


class VLLMEngine:
    def __init__(
        self,
        model_dir: str,
        dtype: str = "float32",
        max_model_len: int = 4096,
        kv_cache_bytes: int | None = 256 << 20,
        seed: int = 0,
        **engine_kwargs,
    ):
        from vllm import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        # processed: the sampled tokens' log-probs under the tempered distribution that drew them, as the
        # transformers engine and the trainer compute them (vLLM's default is the raw, untempered ones)
        engine_kwargs.setdefault("logprobs_mode", "processed_logprobs")
        args = AsyncEngineArgs(
            model=str(model_dir),
            dtype=dtype,
            max_model_len=max_model_len,
            seed=seed,
            enforce_eager=True,
            worker_extension_cls=EXTENSION,
            kv_cache_memory_bytes=kv_cache_bytes,
            **engine_kwargs,
        )
        self.engine = AsyncLLM.from_engine_args(args)
        self.weight_version = 0
        self.sync_group_id: int | None = None

    async def _one(self, ids: list[int], cfg: SamplingConfig, index: int) -> list[Sample]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        # FINAL_ONLY: with n > 1 the streamed outputs carry the sequences finished so far, not all n
        params = SamplingParams(
            n=cfg.n,
            temperature=cfg.temperature,
            top_p=1.0,
            top_k=0,
            max_tokens=cfg.max_tokens,
            seed=None if cfg.seed is None else cfg.seed + index,
            logprobs=0,
            output_kind=RequestOutputKind.FINAL_ONLY,
        )
        version = self.weight_version
        final = None
        async for out in self.engine.generate(TokensPrompt(prompt_token_ids=ids), params, uuid.uuid4().hex):
            final = out
        return [
            Sample(
                list(c.token_ids),
                [step[t].logprob for step, t in zip(c.logprobs, c.token_ids)],
                c.text,
                "stop" if c.finish_reason == "stop" else "length",
                version,
            )
            for c in final.outputs
        ]

    async def warmup(self, cfg: SamplingConfig) -> None:
        """Nothing left to do: vLLM profiles memory and captures its CUDA graphs while it is built."""

    async def generate(self, prompt_ids: list[list[int]], cfg: SamplingConfig) -> list[list[Sample]]:
        return list(await asyncio.gather(*(self._one(ids, cfg, i) for i, ids in enumerate(prompt_ids))))

    async def update_weights(self, buckets: list[bytes], version: int, keys: list[str] | None = None) -> float:
        """Stage every bucket in the worker, then apply them at once (`_apply`). Returns the seconds it took."""
        t0 = time.perf_counter()
        await self.engine.collective_rpc("stage_weights_begin", args=(list(keys or []),))
        for blob in buckets:
            await self.engine.collective_rpc("stage_weights_bucket", args=(blob,))
        await self._apply(version)
        return time.perf_counter() - t0

    async def join_sync_group(self, spec: dict, rank: int) -> None:
        """The worker joins the trainer's broadcast group (rank `rank`): the weights go straight to where the
        model lives."""
        await self.engine.collective_rpc("sync_group_join", args=(spec, rank))
        self.sync_group_id = spec["id"]

    async def receive_weights(self, buckets: list, version: int, keys: list[str]) -> float:
        """The worker takes part in the trainer's broadcast and stages what it received; then `_apply`."""
        t0 = time.perf_counter()
        await self.engine.collective_rpc("sync_group_receive", args=(buckets, list(keys)))
        await self._apply(version)
        return time.perf_counter() - t0

    async def _apply(self, version: int) -> None:
        """Pause (in-flight requests finish first), reload the staged weights once, reset the prefix cache,
        resume."""
        await self.engine.pause_generation(mode="wait")
        try:
            await self.engine.collective_rpc("stage_weights_apply")
            await self.engine.reset_prefix_cache()
            self.weight_version = version
        finally:
            await self.engine.resume_generation()

    async def shutdown(self) -> None:
        """Shut down and drop the engine now: left to the interpreter's exit, AsyncLLM.__del__ shuts it down a
        second time after its modules are torn down and prints an (ignored) TypeError traceback."""
        if self.engine is not None:
            engine, self.engine = self.engine, None
            engine.shutdown()
            del engine
