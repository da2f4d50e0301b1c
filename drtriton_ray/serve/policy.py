"""The Policy deployment, `PolicyDeployment` (the model source: one engine per replica, shared by every search), and
the adapter the synchronous search calls it through, with the interface of drtriton_ray.search.sources.PolicyModel
(`ids`, `generate`, `generate_s`, `close`).

A replica loads the model folder once (transformers on CPU, vLLM on a GPU where installed) and keeps it; searches
on any Search replica send it prompts. It sees prompts and answers only: never the user's program as code."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from pathlib import Path
from typing import Optional

from ray import serve

from drtriton_ray.serve.verifier import retryable

log = logging.getLogger("ray.serve")


# Serve's deployment name stays "Policy": replica names, logs and the dashboard show it
@serve.deployment(name="Policy", max_ongoing_requests=8, ray_actor_options={"num_cpus": 1})
class PolicyDeployment:
    def __init__(self, model: str, device: str, engine: Optional[str], max_tokens: int, seed: int = 0):
        from drtriton_ray.search.settings import default_engine
        from drtriton_ray.search.sources import PolicyModel

        if device == "cuda":
            device = "cuda:0"  # Ray sets CUDA_VISIBLE_DEVICES to this replica's GPU
        engine = engine or default_engine(device)  # as drtriton convert picks it
        self.engine = PolicyModel(Path(model), device, engine, max_tokens, seed)
        # Loaded (and on a GPU compiled) before the replica takes requests, not in the first search's budget; off
        # this thread, whose event loop Serve may be running, as generate_sync runs off it.
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            pool.submit(self.engine.warm).result()
        # The engine drives its own event loop: one call at a time, off the replica's loop.
        self.lock = threading.Lock()

    def generate_sync(self, prompts: list, n: int, temperature: float, seed: int) -> list:
        with self.lock:
            return self.engine.generate(prompts, n, temperature, seed)

    async def generate(self, request: tuple) -> list[list[str]]:
        """n answers per prompt (token-id lists): `(prompts, n, temperature, seed)`."""
        return await asyncio.to_thread(self.generate_sync, *request)

    def ids(self, messages: list[dict]):
        """The prompt's token ids, or None when prompt and answer would not fit the model's context."""
        return self.engine.ids(messages)

    def __del__(self):
        engine = getattr(self, "engine", None)
        if engine is not None:
            engine.close()


class RemotePolicy:
    """PolicyModel's interface over the Policy deployment's handle; a call whose replica died is sent again."""

    def __init__(self, handle, retries: int = 5):
        self.handle, self.retries = handle, retries
        self.generate_s = 0.0

    def call(self, method: str, arg):
        for attempt in range(self.retries + 1):
            try:
                return getattr(self.handle, method).remote(arg).result()
            except retryable() as e:
                if attempt == self.retries:
                    raise
                log.warning("policy replica died during %s (%s); sending it again", method, type(e).__name__)
                time.sleep(attempt + 1)

    def ids(self, messages: list[dict]):
        return self.call("ids", messages)

    def generate(self, prompts: list, n: int, temperature: float, seed: int) -> list[list[str]]:
        if not prompts or n < 1:
            return [[] for _ in prompts]
        t0 = time.perf_counter()
        try:
            return self.call("generate", (prompts, n, temperature, seed))
        finally:
            self.generate_s += time.perf_counter() - t0

    def close(self) -> None:
        """The engine belongs to the deployment: nothing to close here."""
