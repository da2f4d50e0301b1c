"""Weight sync from the trainer to every rollout engine, the engines' side (pool.py hosts it; push.py is the trainer's).

Object store (`sync.method: object_store`): the trainer puts the new weights as safetensors buckets
(`engine.pack_buckets`) and hands the refs over; `push` sends them to every engine at once (each engine pauses,
reloads once, resets its prefix cache and resumes) and times it. The latest refs are kept so that an engine which
died and was restarted (Ray brings it back with its start-up weights) is brought up to date by `ensure` before it
generates again.

Collective (`sync.method: collective`, collective.py): `join` puts every engine into the trainer's broadcast group,
`in_group` says whether all of them still are, and `receive` has every engine take part in the trainer's broadcast
and apply what it received. A restarted engine is out of the group until the trainer's next push forms a new one;
until then it generates with its start-up weights, and the buffer's staleness bound drops those groups."""

from __future__ import annotations

import asyncio
import time

from ray.exceptions import RayActorError

RESTART_WAIT_S = 180.0  # how long a call waits for Ray to bring a dead actor back (process start, model load)


async def call_with_restarts(call, on_failure=None, wait_s: float = RESTART_WAIT_S):
    """Await `call()` (which submits an actor method), submitting it again while its actor is dead and Ray
    restarts it; gives up (re-raises) once `wait_s` has passed. `on_failure` is told of every failed attempt."""
    deadline = time.monotonic() + wait_s
    delay = 0.5
    while True:
        try:
            return await call()
        except RayActorError:
            if on_failure is not None:
                on_failure()
            if time.monotonic() + delay > deadline:
                raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 10.0)


class WeightSync:
    def __init__(self, engines: list, restart_wait_s: float = RESTART_WAIT_S):
        self.engines = engines
        self.restart_wait_s = restart_wait_s
        self.version = 0
        self.buckets: list = []
        self.keys: list[str] = []
        # One update at a time per engine: a push and a repair racing on one engine would interleave their
        # staged buckets (vLLM's extension stages per engine), and the later one would apply an empty set.
        self._locks = [asyncio.Lock() for _ in engines]

    def _lock(self, engine) -> asyncio.Lock:
        return self._locks[next(i for i, e in enumerate(self.engines) if e is engine)]

    async def _update(self, engine) -> float:
        """Bring `engine` to the latest version unless it is there already (a repair may have done it). An engine
        ahead of it is updated too: a trainer restarted from a checkpoint pushes an older version than the engines
        hold, and their weights are from steps it threw away."""
        async with self._lock(engine):
            if (
                await call_with_restarts(lambda: engine.weight_version.remote(), wait_s=self.restart_wait_s)
                == self.version
            ):
                return 0.0
            return await call_with_restarts(
                lambda: engine.update_weights.remote(self.buckets, self.version, self.keys), wait_s=self.restart_wait_s
            )

    async def push(self, buckets: list, version: int, keys: list[str]) -> dict[str, float]:
        self.buckets, self.version, self.keys = buckets, version, keys
        t0 = time.perf_counter()
        seconds = await asyncio.gather(*(self._update(e) for e in self.engines))
        return {"sync_s": time.perf_counter() - t0, "engine_update_s": max(seconds)}

    async def join(self, spec: dict) -> None:
        """Every engine joins the broadcast group `spec` (rank i + 1; the trainer's rank 0 joins meanwhile)."""
        await asyncio.gather(
            *(
                call_with_restarts(lambda e=e, r=r: e.join_sync_group.remote(spec, r), wait_s=self.restart_wait_s)
                for r, e in enumerate(self.engines, start=1)
            )
        )

    async def in_group(self, group_id: int) -> bool:
        ids = await asyncio.gather(
            *(
                call_with_restarts(lambda e=e: e.sync_group_id.remote(), wait_s=self.restart_wait_s)
                for e in self.engines
            )
        )
        return all(i == group_id for i in ids)

    async def receive(self, buckets: list, version: int, keys: list[str]) -> dict[str, float]:
        """Every engine receives the trainer's broadcast and applies it. An engine that fails (it died during the
        broadcast, which then fails for the trainer too) is counted, not raised: the next push re-forms the group."""
        self.version = version
        t0 = time.perf_counter()

        async def one(engine) -> float:
            async with self._lock(engine):
                return await engine.receive_weights.remote(buckets, version, keys)

        results = await asyncio.gather(*(one(e) for e in self.engines), return_exceptions=True)
        failed = [r for r in results if isinstance(r, BaseException)]
        seconds = [r for r in results if not isinstance(r, BaseException)]
        return {"sync_s": time.perf_counter() - t0, "engine_update_s": max(seconds, default=0.0), "failed": len(failed)}

    async def newer_than(self, version: int, poll_s: float = 0.2) -> None:
        """Return once weights newer than `version` are on their way (a push or broadcast began; `ensure` makes an
        engine take them before it generates)."""
        while self.version <= version:
            await asyncio.sleep(poll_s)

    async def ensure(self, engine) -> bool:
        """True when the engine was not at the latest version (restarted, or a push is under way) and has been
        updated."""
        if self.buckets and await engine.weight_version.remote() != self.version:
            return await self._update(engine) > 0
        return False
