"""Ray front of the verifier: one `GPUVerifier` actor per GPU (num_gpus=1; its pool has `gpu_workers` processes,
default 4, that compile and check concurrently and take turns to time, so candidates on a GPU are still timed one
at a time), CPU verifier actors for interpreter mode, and a service that spreads a batch over all of them and
returns verdicts in input order. The only module of drtriton_ray.verify that imports Ray."""

from __future__ import annotations

import os
from typing import Optional, Sequence

import ray
from ray.util import ActorPool

from drtriton_ray.verify.pool import WorkerPool
from drtriton_ray.verify.task import Limits, Task
from drtriton_ray.verify.verdict import Verdict


class _VerifierActor:
    """Owns a persistent worker pool on its device; the pool's workers are this actor's child processes."""

    def __init__(
        self,
        device: str,
        workers: int = 1,
        max_tasks_per_worker: int = 100,
        limits: Optional[Limits] = None,
        reference_cache: Optional[str] = None,
    ):
        if device == "cuda":
            # Ray sets CUDA_VISIBLE_DEVICES to this actor's GPU: inside it, that GPU is cuda:0.
            device = "cuda:0"
        self.pool = WorkerPool(
            device,
            size=workers,
            max_tasks_per_worker=max_tasks_per_worker,
            limits=limits,
            name=f"ray-{device}-{os.getpid()}",
            reference_cache=reference_cache,
        )

    def verify(self, tasks: list[Task]) -> list[Verdict]:
        return self.pool.verify(tasks)

    def capture(self, sources: list[str], dynamic: Optional[Sequence[str]] = ()) -> list[dict]:
        return self.pool.capture(sources, dynamic)

    def inductor_code(self, requests: list[tuple[str, list]]) -> list[dict]:
        return self.pool.inductor_code(requests)

    def time_reference(self, problem_source: str) -> Optional[dict]:
        return self.pool.time_reference(problem_source)

    def replacements(self) -> int:
        return self.pool.replacements

    def close(self) -> None:
        self.pool.close()


GPUVerifier = ray.remote(num_gpus=1, num_cpus=1)(_VerifierActor)
CPUVerifier = ray.remote(num_cpus=1)(_VerifierActor)


class VerifyService:
    """Spreads batches over every verifier actor. `gpu_actors=None` takes one per GPU in the cluster."""

    def __init__(
        self,
        gpu_actors: Optional[int] = None,
        cpu_actors: int = 0,
        cpu_workers_per_actor: int = 1,
        max_tasks_per_worker: int = 100,
        limits: Optional[Limits] = None,
        chunk: int = 4,
        gpu_workers: int = 4,
        reference_cache: Optional[str] = None,
    ):
        """gpu_workers: worker processes per GPU actor. chunk: tasks per call; keep it >= gpu_workers so a GPU
        actor's workers all have work. reference_cache: a folder for reference times shared across runs."""
        if gpu_actors is None:
            gpu_actors = int(ray.cluster_resources().get("GPU", 0))
        if gpu_actors + cpu_actors < 1:
            raise ValueError(
                "VerifyService needs at least one verifier actor (no GPU in the cluster: pass cpu_actors >= 1)"
            )
        self.chunk = max(1, chunk)
        if gpu_workers < 1:
            raise ValueError(f"gpu_workers must be >= 1, got {gpu_workers}")
        # the pool's processes use the actor's CPUs: reserve one per worker
        self.actors = [
            GPUVerifier.options(num_cpus=gpu_workers).remote(
                "cuda", gpu_workers, max_tasks_per_worker, limits, reference_cache
            )
            for _ in range(gpu_actors)
        ]
        self.actors += [
            CPUVerifier.remote("cpu", cpu_workers_per_actor, max_tasks_per_worker, limits, reference_cache)
            for _ in range(cpu_actors)
        ]

    def verify(self, tasks: list[Task]) -> list[Verdict]:
        """Verdicts in input order. Small chunks, handed to whichever actor is free, balance slow candidates."""
        chunks = [tasks[i : i + self.chunk] for i in range(0, len(tasks), self.chunk)]
        pool = ActorPool(self.actors)
        return [v for part in pool.map(lambda actor, batch: actor.verify.remote(batch), chunks) for v in part]

    def capture(self, sources: list[str], dynamic: Optional[Sequence[str]] = ()) -> list[dict]:
        """Each program captured in a worker of whichever actor is free (pool.WorkerPool.capture)."""
        pool = ActorPool(self.actors)
        batches = [[s] for s in sources]
        return [r for part in pool.map(lambda actor, one: actor.capture.remote(one, dynamic), batches) for r in part]

    def inductor_code(self, requests: list[tuple[str, list]]) -> list[dict]:
        """Each fragment compiled by torch.compile on the first actor (a GPU's where there is one: pool.WorkerPool's
        inductor_code)."""
        return ray.get(self.actors[0].inductor_code.remote(requests))

    def time_reference(self, problem_source: str) -> Optional[dict]:
        """A program's eager and torch.compile times on the first GPU actor (None without one)."""
        return ray.get(self.actors[0].time_reference.remote(problem_source))

    def shutdown(self) -> None:
        ray.get([a.close.remote() for a in self.actors])
        for a in self.actors:
            ray.kill(a)
        self.actors = []
