"""The Verifier deployment, `VerifierDeployment` (a sandboxed WorkerPool per replica: one replica per GPU, or CPU
replicas running the Triton interpreter), and the adapter through which a synchronous search calls it.

Replicas take one call at a time by default (`max_ongoing_requests=1`): two batches timed at once on one GPU would
corrupt each other's times, and the pool already spreads one batch over its workers. A replica can die mid-call
(killed, its node gone): Serve starts another, and the adapter sends the call again, so a search never loses a
batch to it; the verifier's own verdicts for a candidate that crashes or hangs are ordinary verdicts, not
failures of the call."""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Optional, Sequence

from ray import serve

log = logging.getLogger("ray.serve")


# Serve's deployment name stays "Verifier": replica names, logs and the dashboard show it
@serve.deployment(name="Verifier", max_ongoing_requests=1, ray_actor_options={"num_cpus": 1})
class VerifierDeployment:
    def __init__(self, device: str, workers: int, task_timeout_s: float, max_tasks_per_worker: int = 100):
        from drtriton_ray.verify import Limits, WorkerPool

        if device == "cuda":
            device = "cuda:0"  # Ray sets CUDA_VISIBLE_DEVICES to this replica's GPU
        self.pool = WorkerPool(
            device,
            size=workers,
            max_tasks_per_worker=max_tasks_per_worker,
            limits=Limits(task_timeout_s=task_timeout_s),
            name=f"serve-{device}-{os.getpid()}",
        )
        # The pool is not thread-safe; Serve may run sync methods on several threads when max_ongoing_requests > 1.
        self.lock = threading.Lock()

    def verify(self, tasks: list) -> list:
        with self.lock:
            return self.pool.verify(tasks)

    def capture(self, sources: list[str], dynamic: Optional[Sequence[str]] = ()) -> list[dict]:
        with self.lock:
            return self.pool.capture(sources, dynamic)

    def inductor_code(self, requests: list) -> list[dict]:
        with self.lock:
            return self.pool.inductor_code(requests)

    def time_reference(self, source: str) -> Optional[dict]:
        with self.lock:
            return self.pool.time_reference(source)

    def machine(self, _=None) -> str:
        """What the search's cache is keyed by: this replica's GPU model, or cpu-interpreter."""
        from drtriton_ray.search.cache import device_key

        return device_key(self.pool.device)

    def pid(self) -> int:
        """This replica's process id (tests and operators find the replica to kill or inspect)."""
        return os.getpid()

    def __del__(self):
        pool = getattr(self, "pool", None)
        if pool is not None:
            pool.close()


class VerifierUnavailable(RuntimeError):
    """Every retry of a verifier call found its replica dead."""


def retryable() -> tuple:
    """What a call to a dead or restarting replica raises (the request itself did nothing wrong)."""
    from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError

    return (RayActorError, ActorDiedError, ActorUnavailableError)


class RemoteVerifier:
    """The search's verifier (verify, capture, inductor_code, time_reference) over the Verifier deployment's handle.
    Calls block on `.result()`, so the search runs in a thread of its own, never on a replica's event loop."""

    def __init__(self, handle, retries: int = 5, backoff_s: float = 1.0):
        self.handle, self.retries, self.backoff_s = handle, retries, backoff_s
        self.resent = 0  # calls sent again after a replica died

    def call(self, method: str, *args):
        errors = retryable()
        for attempt in range(self.retries + 1):
            try:
                return getattr(self.handle, method).remote(*args).result()
            except errors as e:
                if attempt == self.retries:
                    raise VerifierUnavailable(f"the verifier died {attempt + 1} times during {method}: {e}") from None
                self.resent += 1
                log.warning("verifier replica died during %s (%s); sending it again", method, type(e).__name__)
                time.sleep(self.backoff_s * (attempt + 1))  # Serve is starting a replacement

    def verify(self, tasks: list) -> list:
        return self.call("verify", tasks)

    def capture(self, sources: list[str], dynamic: Optional[Sequence[str]] = ()) -> list[dict]:
        return self.call("capture", sources, dynamic)

    def inductor_code(self, requests: list) -> list[dict]:
        return self.call("inductor_code", requests)

    def time_reference(self, source: str) -> Optional[dict]:
        return self.call("time_reference", source)

    def machine(self) -> str:
        return self.call("machine", None)
