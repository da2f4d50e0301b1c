"""The trainer's side of the weight sync (rank 0 only), one class per `sync.method`, the same interface:
`push(state, version)` starts a sync and returns the engine pool's (pool.py) ObjectRef for its timings, without
waiting for the engines to apply it; `close()` leaves. `WeightPublisher` keeps one sync in flight at a time.

- `ObjectStorePush`: safetensors buckets into Ray's object store; the engine pool hands the refs to every engine.
- `CollectivePush`: a broadcast group with every engine (collective.py): the state goes out bucket by bucket as flat
  tensors, NCCL between GPUs or gloo; the trainer returns from `push` once the broadcast is done, the engines apply
  on their own. The group is formed on the first push, and again whenever an engine is not in it (restarted) or a
  broadcast failed."""

from __future__ import annotations

import logging
import time

import ray

from drtriton_ray.rollout.collective import SyncGroup, group_spec
from drtriton_ray.rollout.engine import pack_buckets, plan_buckets

log = logging.getLogger("drtriton.sync")


class ObjectStorePush:
    def __init__(self, pool, bucket_bytes: int):
        self.pool, self.bucket_bytes = pool, bucket_bytes

    def push(self, state: dict, version: int):
        refs = [ray.put(b) for b in pack_buckets(state, self.bucket_bytes)]
        return self.pool.sync_weights.remote(refs, version, list(state))

    def close(self) -> None:
        return None


class CollectivePush:
    def __init__(self, pool, engines: int, bucket_bytes: int, backend: str, timeout_s: float, device):
        self.pool, self.engines, self.bucket_bytes = pool, engines, bucket_bytes
        self.backend, self.timeout_s, self.device = backend, timeout_s, device
        self.group: SyncGroup | None = None
        self.groups_formed = 0

    def _form(self) -> None:
        self.close()
        spec = group_spec(self.groups_formed + 1, self.engines + 1, self.backend, self.timeout_s)
        joined = self.pool.join_sync_group.remote(spec)
        try:
            self.group = SyncGroup(spec, 0, self.device)  # the rendezvous: returns once every engine joined
        finally:
            ray.get(joined)
        self.groups_formed += 1

    def push(self, state: dict, version: int):
        if self.group is None or not ray.get(self.pool.sync_group_ready.remote(self.group.id)):
            self._form()
        buckets = plan_buckets(state, self.bucket_bytes)
        received = self.pool.receive_weights.remote(buckets, version, list(state))
        try:
            self.group.broadcast(state, buckets)
        except Exception as e:  # noqa: BLE001 - a member died during the broadcast: the next push forms a new group
            log.warning("weight broadcast failed (%s: %s); the next sync forms a new group", type(e).__name__, e)
            self.close()
        return received

    def close(self) -> None:
        if self.group is not None:
            self.group.close()
            self.group = None


class WeightPublisher:
    """Rank 0's weight sync, one in flight: the engines update while the trainer goes on to the next step (its groups
    may be one version old anyway), and the trainer waits only for the previous sync, so an engine finishing a long
    generate call does not hold training up."""

    def __init__(self, pusher):
        self.pusher = pusher
        self.in_flight = None  # the sync under way

    def finish(self) -> dict:
        """Wait for the sync under way; its timings as metrics ({} when none)."""
        if self.in_flight is None:
            return {}
        timings, self.in_flight = ray.get(self.in_flight), None
        return {
            "time/engine_update_s": timings["engine_update_s"],
            "time/sync_total_s": timings["sync_s"],
            "sync/failed_engines": timings.get("failed", 0),
        }

    def publish(self, state: dict, version: int, wait: bool) -> dict:
        """Start sending `state` as `version` (with `wait`, until the engines hold it); `time/sync_s` is the
        trainer's wait."""
        t0 = time.perf_counter()
        done = self.finish()
        self.in_flight = self.pusher.push(state, version)
        if wait:
            done = self.finish()
        return {"time/sync_s": time.perf_counter() - t0, **done}

    def close(self) -> None:
        self.finish()
        self.pusher.close()


def make_publisher(
    method: str, pool, engines: int, bucket_bytes: int, backend: str, timeout_s: float, device
) -> WeightPublisher:
    """The publisher for `sync.method` (object_store or collective)."""
    if method == "object_store":
        return WeightPublisher(ObjectStorePush(pool, bucket_bytes))
    return WeightPublisher(CollectivePush(pool, engines, bucket_bytes, backend, timeout_s, device))
