"""A rollout engine behind a Ray actor: the same `generate` / `update_weights` interface on every
machine, a vLLM engine where vLLM is installed and a transformers engine elsewhere.

The engine is built inside the actor's event loop on first use (AsyncLLM binds to the loop that
creates it). An actor that dies is restarted by Ray with the weights it was started from; its
`weight_version` then says so, and the weight sync brings it up to date before it is used again."""

from __future__ import annotations

import asyncio
from typing import Any

import ray

from drtriton_ray.rollout.engine import Sample, SamplingConfig


class RolloutEngineActor:
    def __init__(self, engine: str, model_dir: str, options: dict[str, Any]):
        if engine not in ("vllm", "hf"):
            raise ValueError(f"unknown rollout engine {engine!r}; known: vllm, hf")
        self.kind, self.model_dir, self.options = engine, model_dir, options
        self.engine = None
        self._building = asyncio.Lock()

    async def _engine(self):
        async with self._building:
            if self.engine is None:
                if self.kind == "vllm":
                    from drtriton_ray.rollout.vllm_engine import VLLMEngine

                    self.engine = VLLMEngine(self.model_dir, **self.options)
                else:
                    from drtriton_ray.rollout.hf_engine import HFEngine

                    self.engine = HFEngine(self.model_dir, **self.options)
        return self.engine

    async def warmup(self, cfg: SamplingConfig) -> None:
        """Build the engine and prepare it for calls like `cfg` (the transformers engine compiles its decoding step;
        vLLM warms up as it is built); generate calls made meanwhile wait for it."""
        await (await self._engine()).warmup(cfg)

    async def generate(self, prompt_ids: list[list[int]], cfg: SamplingConfig) -> list[list[Sample]]:
        return await (await self._engine()).generate(prompt_ids, cfg)

    async def update_weights(self, buckets: list, version: int, keys: list[str]) -> float:
        """`buckets` are object refs (resolved here, one at a time would not save memory: the update is applied
        all at once) or bytes."""
        blobs = [await b if isinstance(b, ray.ObjectRef) else b for b in buckets]
        return await (await self._engine()).update_weights(blobs, version, keys)

    async def join_sync_group(self, spec: dict, rank: int) -> None:
        await (await self._engine()).join_sync_group(spec, rank)

    async def sync_group_id(self) -> int | None:
        """The broadcast group this engine is in (None: none, e.g. after a restart)."""
        return (await self._engine()).sync_group_id

    async def receive_weights(self, buckets: list, version: int, keys: list[str]) -> float:
        return await (await self._engine()).receive_weights(buckets, version, keys)

    async def weight_version(self) -> int:
        return (await self._engine()).weight_version

    async def shutdown(self) -> None:
        if self.engine is not None:
            await self.engine.shutdown()


def rollout_actor(num_cpus: float, num_gpus: float, max_restarts: int, resources: dict[str, float] | None = None):
    """The actor class with its resources (`resources`: custom ones, which pick the nodes it runs on); restarted
    engines come back with their start-up weights."""
    return ray.remote(num_cpus=num_cpus, num_gpus=num_gpus, resources=resources or {}, max_restarts=max_restarts)(
        RolloutEngineActor
    )
