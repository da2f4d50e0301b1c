"""The model on a Ray Train worker: wrapped for DDP or FSDP, and its gradient clipped as a whole."""

from __future__ import annotations


def prepare_model(model, strategy: str):
    """Ray Train's `prepare_model`, except FSDP on CPU, which Ray refuses (its check asks for GPUs) although torch's
    FSDP shards and gathers over gloo on CPU as well: there the model is wrapped here, with the same defaults (the
    whole model as one sharded unit)."""
    import ray.train
    import ray.train.torch

    device = ray.train.torch.get_device()
    if strategy == "fsdp" and device.type == "cpu" and ray.train.get_context().get_world_size() > 1:
        from torch.distributed.fsdp import FullyShardedDataParallel

        return FullyShardedDataParallel(model.to(device), device_id=device)
    return ray.train.torch.prepare_model(model, parallel_strategy=strategy)


def clip_grad_norm(model, max_norm: float) -> float:
    """Clip the gradient's norm over the whole model; under FSDP, over every rank's shard (each rank holds a part of
    the gradient, so the norm of its own part is not the model's)."""
    import torch
    from torch.distributed.fsdp import FullyShardedDataParallel

    if isinstance(model, FullyShardedDataParallel):
        return float(model.clip_grad_norm_(max_norm))
    return float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm))
