"""Checkpoints of a Ray Train trainer, the same for SFT and RL.

A checkpoint is a Hugging Face model folder (weights and tokenizer) plus `trainer_state.pt` (optimizer, scheduler,
step, RNG) and, for a job that has more to resume, one JSON file of its own (RL: curriculum, prompt stream, buffer).
Rank 0 writes it; every rank calls `save`, because FSDP gathers the model and optimizer from every rank.

The optimizer state is saved in its full, unsharded form keyed by parameter name (torch.distributed.checkpoint's
`get_optimizer_state_dict`), which is the same whatever the parallel strategy: a DDP and an FSDP run write the same
file, and `load` shards it again for FSDP. A plain `optimizer.state_dict()` holds only this rank's shard under FSDP
and cannot be loaded into another sharding; checkpoints written that way (by DDP runs before this module) still
load, through `optimizer.load_state_dict`."""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

TRAINER_STATE = "trainer_state.pt"


def unwrap(model):
    """The model inside a DDP wrapper (FSDP is left as it is: it saves through `full_state_dict`)."""
    return model.module if hasattr(model, "module") else model


def _on_gpu(model) -> bool:
    """Whether the gathered state should be moved to the CPU. Not when it is there already: FSDP's offload of a
    CPU model returns views of the gathered parameters, which FSDP frees right after (torch 2.13 raises
    "setStorage: ... out of bounds for storage of size 0"), where without the offload it returns copies."""
    return next(model.parameters()).device.type != "cpu"


def full_state_dict(model) -> dict:
    """The model's complete weights. Every rank must call this (FSDP gathers); under FSDP the result is complete on
    rank 0 only (on the CPU), otherwise it is the model's own tensors, where they are."""
    import torch
    from torch.distributed.fsdp import FullStateDictConfig, FullyShardedDataParallel, StateDictType

    if isinstance(model, FullyShardedDataParallel):
        with FullyShardedDataParallel.state_dict_type(
            model, StateDictType.FULL_STATE_DICT, FullStateDictConfig(offload_to_cpu=_on_gpu(model), rank0_only=True)
        ):
            return model.state_dict()
    inner = model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model
    return inner.state_dict()


def optimizer_state(model, optimizer) -> dict:
    """The optimizer's full state, keyed by parameter name. Every rank must call this (FSDP gathers); complete on
    rank 0 (on a GPU, rank 0 only, moved to the CPU)."""
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    offload = _on_gpu(model) and dist.is_available() and dist.is_initialized()
    return get_optimizer_state_dict(
        model, optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=offload)
    )


def load_optimizer_state(model, optimizer, state: dict) -> None:
    """Load `optimizer_state`'s output on every rank (each rank has the whole file; FSDP keeps its shard)."""
    if any(isinstance(k, int) for k in state.get("state", {})):  # a plain optimizer.state_dict() (DDP, older runs)
        optimizer.load_state_dict(state)
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    set_optimizer_state_dict(model, optimizer, state, options=StateDictOptions(full_state_dict=True))


@dataclass
class Restored:
    """What a trainer starts from: the checkpoint Ray Train handed it, or the starting model."""

    model_dir: str  # the weights to load
    trainer_state: dict | None  # trainer_state.pt; None: a fresh start
    job_state: dict | None  # the job's own JSON file; None: a fresh start (or a job without one)

    @property
    def step(self) -> int:
        return self.trainer_state["step"] if self.trainer_state else 0


class CheckpointManager:
    """Restores a trainer rank from Ray Train's latest checkpoint and reports new ones. `job_state_file`: the name of
    the job's own JSON file in each checkpoint (None: none)."""

    def __init__(self, rank: int, start_model: str, job_state_file: str | None = None):
        self.rank, self.start_model, self.job_state_file = rank, start_model, job_state_file
        self._pending: str | None = None  # the folder of the checkpoint being reported

    def restore(self) -> Restored:
        import ray.train
        import torch

        checkpoint = ray.train.get_checkpoint()
        if not checkpoint:
            return Restored(self.start_model, None, None)
        # a folder of this rank's own: ranks copying into Ray's shared default folder at once read each other's
        # half-written files (a safetensors "header too small")
        folder = checkpoint.to_directory(tempfile.mkdtemp(prefix=f"resume-rank{self.rank}-"))
        state = torch.load(os.path.join(folder, TRAINER_STATE), weights_only=False)
        job = json.loads(Path(folder, self.job_state_file).read_text()) if self.job_state_file else None
        return Restored(folder, state, job)

    @staticmethod
    def load(restored: Restored, model, optimizer, scheduler) -> int:
        """Optimizer, scheduler and RNG from the checkpoint (nothing on a fresh start); the step to start from."""
        import torch

        state = restored.trainer_state
        if state:
            load_optimizer_state(model, optimizer, state["optimizer"])
            scheduler.load_state_dict(state["scheduler"])
            random.setstate(state["python_rng"])
            torch.set_rng_state(state["torch_rng"])
        return restored.step

    def save(
        self,
        step: int,
        model,
        optimizer,
        scheduler,
        tokenizer,
        full: dict | None = None,
        job_state: Callable[[], dict] | None = None,
    ):
        """Write a checkpoint of `step`; every rank calls it. `full`: the model's `full_state_dict` when the caller
        has it already; `job_state`: called on rank 0 for the job's JSON file. Returns the ray.train.Checkpoint on
        rank 0 (None elsewhere) for `report`."""
        import ray.train
        import torch

        full = full_state_dict(model) if full is None else full
        optim = optimizer_state(model, optimizer)
        if self.rank != 0:
            return None
        folder = self._pending = tempfile.mkdtemp(prefix="checkpoint-")
        unwrap(model).save_pretrained(folder, state_dict=full)
        tokenizer.save_pretrained(folder)
        torch.save(
            {
                "optimizer": optim,
                "scheduler": scheduler.state_dict(),
                "step": step,
                "python_rng": random.getstate(),
                "torch_rng": torch.get_rng_state(),
            },
            os.path.join(folder, TRAINER_STATE),
        )
        if self.job_state_file:
            Path(folder, self.job_state_file).write_text(json.dumps(job_state(), default=str))
        return ray.train.Checkpoint.from_directory(folder)

    def report(self, metrics: dict, checkpoint=None) -> None:
        """ray.train.report on every rank (with the checkpoint `save` made on rank 0); Ray Train has copied it to the
        run's storage when this returns, and the local folder goes."""
        import ray.train

        try:
            ray.train.report(metrics, checkpoint=checkpoint)
        finally:
            if self._pending is not None:
                shutil.rmtree(self._pending, ignore_errors=True)
                self._pending = None
