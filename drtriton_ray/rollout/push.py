"""The trainer's side of the weight sync (rank 0 only), one class per `sync.method`, the same interface:
`push(state, version)` starts a sync and returns the generator's ObjectRef for its timings, without waiting for the
engines to apply it; `close()` leaves.

- `ObjectStorePush`: safetensors buckets into Ray's object store; the generator hands the refs to every engine.
- `CollectivePush`: a broadcast group with every engine (collective.py): the state goes out bucket by bucket as flat
  tensors, NCCL between GPUs or gloo; the trainer returns from `push` once the broadcast is done, the engines apply
  on their own. The group is formed on the first push, and again whenever an engine is not in it (restarted) or a
  broadcast failed."""
from __future__ import annotations

import logging

import ray

from drtriton_ray.rollout.collective import SyncGroup, group_spec
from drtriton_ray.rollout.engine import pack_buckets, plan_buckets

log = logging.getLogger("drtriton.sync")


class ObjectStorePush:
    def __init__(self, generator, bucket_bytes: int):
        self.generator, self.bucket_bytes = generator, bucket_bytes

    def push(self, state: dict, version: int):
        refs = [ray.put(b) for b in pack_buckets(state, self.bucket_bytes)]
        return self.generator.sync_weights.remote(refs, version, list(state))

    def close(self) -> None:
        return None


class CollectivePush:
    def __init__(self, generator, engines: int, bucket_bytes: int, backend: str, timeout_s: float, device):
        self.generator, self.engines, self.bucket_bytes = generator, engines, bucket_bytes
        self.backend, self.timeout_s, self.device = backend, timeout_s, device
        self.group: SyncGroup | None = None
        self.groups_formed = 0

    def _form(self) -> None:
        self.close()
        spec = group_spec(self.groups_formed + 1, self.engines + 1, self.backend, self.timeout_s)
        joined = self.generator.join_sync_group.remote(spec)
        try:
            self.group = SyncGroup(spec, 0, self.device)   # the rendezvous: returns once every engine joined
        finally:
            ray.get(joined)
        self.groups_formed += 1

    def push(self, state: dict, version: int):
        if self.group is None or not ray.get(self.generator.sync_group_ready.remote(self.group.id)):
            self._form()
        buckets = plan_buckets(state, self.bucket_bytes)
        received = self.generator.receive_weights.remote(buckets, version, list(state))
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
