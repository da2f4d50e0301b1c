"""The rollout engines of an RL job behind one actor: generation that survives an engine's restart, and the engines'
side of the weight sync (sync.py), which the trainer's rank 0 reaches through it (push.py).

Every generate call first brings its engine up to the latest weights (a restarted engine holds its start-up ones)
and is submitted again while Ray restarts a dead engine. The generator's prompt loops each keep to one engine
(`generate(index, ...)`); the held-out evaluation deals its prompts over all of them (`generate_spread`)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter

from drtriton_ray.rollout.engine import SamplingConfig
from drtriton_ray.rollout.sync import RESTART_WAIT_S, WeightSync, call_with_restarts

log = logging.getLogger("drtriton.engines")


class EnginePool:
    def __init__(self, engines: list, restart_wait_s: float = RESTART_WAIT_S):
        self.engines, self.restart_wait_s = engines, restart_wait_s
        self.sync = WeightSync(engines, restart_wait_s)
        self.counters: Counter = Counter()

    async def warm_up(self, sampling: SamplingConfig) -> None:
        """Get the engines ready (built; the transformers engine's decoding step compiled) while the trainer starts,
        so the first prompts do not wait for it. Seconds taken go to the stats (engine_warmup_s); a failure is
        logged and counted, and shows again in the first generate calls."""
        t0 = time.perf_counter()
        results = await asyncio.gather(*(e.warmup.remote(sampling) for e in self.engines), return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                self.counters["engine_warmup_failures"] += 1
                log.warning("engine warm-up failed: %s: %s", type(r).__name__, r)
        self.counters["engine_warmup_s"] = round(time.perf_counter() - t0)

    async def generate(self, index: int, prompt_ids: list[int], sampling: SamplingConfig) -> list:
        """The answers of engine `index % engines` to one prompt."""
        engine = self.engines[index % len(self.engines)]

        async def attempt():
            if await self.sync.ensure(engine):  # a restarted engine holds its start-up weights
                self.counters["engine_resyncs"] += 1
            return await engine.generate.remote([prompt_ids], sampling)

        [samples] = await call_with_restarts(
            attempt, lambda: self.counters.update(["engine_failures"]), self.restart_wait_s
        )
        return samples

    async def generate_spread(self, prompt_ids: list[list[int]], sampling: SamplingConfig) -> list:
        """Answers to many prompts, dealt round-robin over every engine, back in order (the `eval.policy.Engine`
        interface)."""
        n = len(self.engines)
        for e in self.engines:
            await self.sync.ensure(e)
        parts = await asyncio.gather(
            *(e.generate.remote(prompt_ids[i::n], sampling) for i, e in enumerate(self.engines))
        )
        out: list = [None] * len(prompt_ids)
        for i, part in enumerate(parts):
            out[i::n] = part
        return out

    async def stats(self) -> dict[str, float]:
        return dict(self.counters)

    # -- the weight sync (the trainer's rank 0 calls these through push.py) --
    async def weight_version(self) -> int:
        """The version of the weights the engines hold or are taking (0: their start-up weights)."""
        return self.sync.version

    async def newer_than(self, version: int) -> None:
        """Return once weights newer than `version` are on their way to the engines."""
        await self.sync.newer_than(version)

    async def sync_weights(self, buckets: list, version: int, keys: list[str]) -> dict[str, float]:
        return await self.sync.push(buckets, version, keys)

    async def join_sync_group(self, spec: dict) -> None:
        await self.sync.join(spec)

    async def sync_group_ready(self, group_id: int) -> bool:
        return await self.sync.in_group(group_id)

    async def receive_weights(self, buckets: list, version: int, keys: list[str]) -> dict[str, float]:
        return await self.sync.receive(buckets, version, keys)


class SpreadEngines:
    """`eval.policy.Engine` over an EnginePool actor handle."""

    def __init__(self, pool):
        self.pool = pool

    async def generate(self, prompt_ids: list[list[int]], cfg: SamplingConfig) -> list:
        return await self.pool.generate_spread.remote(prompt_ids, cfg)
