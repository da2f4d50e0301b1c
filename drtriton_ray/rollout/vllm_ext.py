"""vLLM worker extension for weight updates (loaded inside vLLM's worker process by name).

CPU builds prepack linear weights, so `load_weights` works only once; the worker's own
`reload_weights` re-packs. Buckets are staged until the last one arrives, then applied in one
reload, so an update is all or nothing: a missing key fails loudly instead of leaving a half-new
model (the manifest check). With the collective sync (collective.py) the worker joins the trainer's broadcast
group itself and stages what the broadcast delivers."""

from __future__ import annotations

from safetensors.torch import load as st_load

from drtriton_ray.rollout.collective import SyncGroup


class WeightSyncExtension:
    def stage_weights_begin(self, expected_keys: list[str]) -> None:
        self._staged_weights = {}
        self._expected_keys = set(expected_keys)

    def stage_weights_bucket(self, blob: bytes) -> int:
        self._staged_weights.update(st_load(blob))
        return len(self._staged_weights)

    def sync_group_join(self, spec: dict, rank: int) -> None:
        old = getattr(self, "_sync_group", None)
        if old is not None:
            old.close()
        self._sync_group = SyncGroup(spec, rank, self.device)

    def sync_group_receive(self, buckets: list, keys: list[str]) -> int:
        self._staged_weights = self._sync_group.broadcast(None, buckets)
        self._expected_keys = set(keys)
        return len(self._staged_weights)

    def stage_weights_apply(self) -> int:
        staged, expected = self._staged_weights, self._expected_keys
        self._staged_weights, self._expected_keys = {}, set()
        missing = expected - set(staged)
        if missing:
            raise RuntimeError(f"weight update incomplete: {len(missing)} tensors missing, e.g. {sorted(missing)[:3]}")
        self.reload_weights(weights_iterator=iter(staged.items()))
        return len(staged)
