"""Weight sync by collective broadcast from the trainer's rank 0: NCCL between GPUs, gloo anywhere else.

The trainer's rank 0 and every rollout engine (inside vLLM's worker, where the model lives, or the transformers
engine's actor) join one process group of their own, built from a TCPStore that rank 0 hosts: a standalone
`ProcessGroupGloo` / `ProcessGroupNCCL`, so it never touches the default group that DDP/FSDP or vLLM set up in
the same process. A push broadcasts the state dict bucket by bucket, each bucket one flat tensor of one dtype, so
the number of collectives is the number of buckets, never the number of parameters. Receivers stage what arrives
and the engine applies it all at once (pause, load, reset the prefix cache, resume), as the object-store path does.

A group is a fixed set of processes: an engine that dies and is restarted by Ray is no longer in it. Before a push
the trainer asks whether every engine is in the current group and forms a new one (a new port, every member
joining again) when one is not; a broadcast that fails (a member died during it) closes the group, and the next
push forms a new one. Specs and bucket plans (`engine.plan_buckets`) are plain lists and dicts, so they cross Ray
and vLLM's RPC as they are."""

from __future__ import annotations

import datetime
import math
import socket
from typing import Optional

import torch
import torch.distributed as dist

BACKENDS = ("gloo", "nccl")


def group_spec(group_id: int, world: int, backend: str, timeout_s: float) -> dict:
    """How to join a new group hosted by this process (rank 0): its address, a free port, the world size."""
    import ray

    if backend not in BACKENDS:
        raise ValueError(f"unknown sync backend {backend!r}; known: {', '.join(BACKENDS)}")
    with socket.socket() as s:
        s.bind(("", 0))
        port = s.getsockname()[1]
    return {
        "id": group_id,
        "host": ray.util.get_node_ip_address(),
        "port": port,
        "world": world,
        "backend": backend,
        "timeout_s": timeout_s,
    }


class SyncGroup:
    """One member of a weight-sync group. Construction is a rendezvous: it returns once all `world` members joined
    (or raises after the spec's timeout)."""

    def __init__(self, spec: dict, rank: int, device: str | torch.device = "cpu"):
        self.id, self.rank, self.backend = spec["id"], rank, spec["backend"]
        timeout = datetime.timedelta(seconds=spec["timeout_s"])
        # gloo moves host memory; NCCL moves the device's own
        self.device = torch.device(device) if self.backend == "nccl" else torch.device("cpu")
        self._store = dist.TCPStore(
            spec["host"], spec["port"], spec["world"], is_master=rank == 0, timeout=timeout, wait_for_workers=False
        )
        store = dist.PrefixStore(f"drtriton-sync-{spec['id']}", self._store)
        if self.backend == "nccl":
            if self.device.index is None:  # "cuda": the process's current GPU (Ray sets what it may see)
                self.device = torch.device("cuda", torch.cuda.current_device())
            torch.cuda.set_device(self.device)
            self._pg = dist.ProcessGroupNCCL(store, rank, spec["world"])
        else:
            self._pg = dist.ProcessGroupGloo(store, rank, spec["world"], timeout)

    def broadcast(self, state: Optional[dict[str, torch.Tensor]], buckets: list[list]) -> dict[str, torch.Tensor]:
        """Rank 0 sends `state` along the plan; the others receive it (returned; rank 0 gets {} back)."""
        received: dict[str, torch.Tensor] = {}
        opts = dist.BroadcastOptions()
        opts.rootRank = 0
        for dtype_name, entries in buckets:
            dtype = getattr(torch, dtype_name)
            if self.rank == 0:
                flat = torch.cat([state[name].detach().reshape(-1).to(self.device, dtype) for name, _ in entries])
            else:
                numel = sum(math.prod(shape) for _, shape in entries)
                flat = torch.empty(numel, dtype=dtype, device=self.device)
            self._pg.broadcast([flat], opts).wait()
            if self.rank != 0:
                offset = 0
                for name, shape in entries:
                    n = math.prod(shape)
                    received[name] = flat[offset : offset + n].view(shape)
                    offset += n
        return received

    def close(self) -> None:
        self._pg = self._store = None
